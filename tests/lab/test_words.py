"""What the commands say: help texts that agree with each other and with what the servers serve."""

from __future__ import annotations

import argparse
import re
from pathlib import Path
from typing import Any

import pytest

from keyqueue.apiserver.objects.resources import BUILTINS, REVIEWS
from keyqueue.lab.__main__ import main
from keyqueue.lab.commands import COMMANDS

from .ptys import interrupt_after


@pytest.mark.parametrize("name", sorted(COMMANDS))
def test_every_default_is_written_the_same_way(name: str) -> None:
    parser = argparse.ArgumentParser()
    COMMANDS[name].load().add_arguments(parser)
    for action in parser._actions:
        if not action.option_strings or action.help in (None, argparse.SUPPRESS):
            continue
        if action.default not in (None, False, argparse.SUPPRESS):
            assert "(default" in action.help, (action.option_strings, action.help)


def test_apiserver_help_names_what_it_serves_and_no_counters(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apiserver", "--help"]) == 0
    text = " ".join(capsys.readouterr().out.split())
    assert "explain" not in text and "counters" not in text
    for resource in BUILTINS:
        if resource not in REVIEWS:
            assert resource.kind in text, resource.kind


@pytest.mark.timeout(120)
def test_apiserver_without_kubeconfig_writes_a_temporary_one_and_deletes_it() -> None:
    status, out = interrupt_after(["apiserver", "--backend", "memory"], lambda line: line.startswith("stop with"),
                                  timeout=60)
    assert status == 0, out
    match = re.search(r"^kubeconfig: (\S+)", out, re.M)
    assert match is not None, out
    assert "Traceback" not in out and not Path(match.group(1)).exists()
    for resource in BUILTINS:
        if resource not in REVIEWS:
            assert resource.kind in out.splitlines()[0], resource.kind


def test_one_name_per_counter_in_the_text_and_the_json(lab: Any, capsys: pytest.CaptureFixture[str]) -> None:
    status, summary = lab("run", "--duration", "1.1", "--rate", "2000", "--keys", "3", "--quiet", "--plain")
    assert status == 0
    out = capsys.readouterr().out

    def names(tag: str) -> set[str]:
        lines = [line for line in out.splitlines() if line.startswith(tag)]
        return set(re.findall(r"([A-Za-z][\w.-]*)=", "\n".join(lines)))

    stats, funnel = names("[STATS]"), names("[FUNNEL]")
    assert stats and funnel and not stats & funnel, stats & funnel  # a name means one thing
    for name in ("deduplicated", "marked", "absorbed"):  # the queue's decisions: the JSON's names
        assert name in stats and name in summary, name


def test_one_of_a_thing_is_singular(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "--keys", "1", "--workers", "1", "--rate", "2", "--duration", "1", "--fail", "0",
                 "--quiet", "--plain"]) == 0
    out = capsys.readouterr().out
    wrong = re.findall(r"(?<![\d,.=])1 (?:keys|workers|adds|failures|hand-outs|redeliveries|times|were)(?![\w-])",
                       out)
    assert wrong == [], out
    assert "onto 1 key " in out and "1 worker holds" in out
