"""The lab's subcommands: a registry of names → modules, loaded only when chosen.

A subcommand is any importable module with two functions::

    def add_arguments(parser: argparse.ArgumentParser) -> None: ...
    def run(args: argparse.Namespace) -> int: ...          # the process exit status

To add one, append a :class:`Command` to :data:`COMMANDS` (or call :func:`register`). Modules are imported only
when their subcommand runs, so a subcommand whose module (or one of its dependencies) is missing does not break
the others: it reports what is missing and exits with status 2.
"""

from __future__ import annotations

import argparse
import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import cast

from keyqueue.lab.common import install_line

__all__ = ["COMMANDS", "DEFAULT_COMMAND", "Command", "CommandUnavailable", "LoadedCommand", "register"]


class CommandUnavailable(RuntimeError):
    """The module behind a subcommand cannot be imported or lacks ``add_arguments``/``run``."""


@dataclass(frozen=True, slots=True)
class LoadedCommand:
    """A subcommand's two entry points, after its module was imported."""

    add_arguments: Callable[[argparse.ArgumentParser], None]
    run: Callable[[argparse.Namespace], int]


@dataclass(frozen=True, slots=True)
class Command:
    """One subcommand: its name, the module that implements it, and a one-line summary for ``--help``."""

    name: str
    module: str
    summary: str

    def load(self) -> LoadedCommand:
        """Import the module. Raises :class:`CommandUnavailable` (with the reason) if it cannot be used."""
        try:
            mod = importlib.import_module(self.module)
        except ModuleNotFoundError as exc:
            missing = exc.name or "?"
            if self.module == missing or self.module.startswith(missing + "."):
                raise CommandUnavailable(
                    f"the '{self.name}' subcommand is not available in this installation: "
                    f"its module {self.module} does not exist yet"
                ) from exc
            raise CommandUnavailable(
                f"the '{self.name}' subcommand needs the Python package '{missing}', which is not installed "
                f"(module {self.module} imports it); install everything the lab needs with: {install_line('lab')}"
            ) from exc
        add_arguments = getattr(mod, "add_arguments", None)
        run = getattr(mod, "run", None)
        if not callable(add_arguments) or not callable(run):
            raise CommandUnavailable(
                f"the '{self.name}' subcommand's module {self.module} does not define add_arguments(parser) and "
                "run(args)"
            )
        return LoadedCommand(
            cast(Callable[[argparse.ArgumentParser], None], add_arguments),
            cast(Callable[[argparse.Namespace], int], run),
        )


COMMANDS: dict[str, Command] = {}


def register(command: Command) -> None:
    """Add (or replace) a subcommand in :data:`COMMANDS`."""
    COMMANDS[command.name] = command


for _command in (
    Command("run", "keyqueue.lab.firehose_cli", "the firehose: a generator floods a few keys, workers drain them "
            "(default; --slow-motion to watch one key)"),
    Command("dedup", "keyqueue.lab.dedup", "100,000 adds of one key → one entry; adds to a held key → one redelivery"),
    Command("race", "keyqueue.lab.race", "same-key concurrency detector on keyqueue (and on a plain queue with "
            "--control)"),
    Command("backoff", "keyqueue.lab.backoff", "per-key exponential backoff, reset by forget, and a thundering herd "
            "smoothed by the shared bucket"),
    Command("drain", "keyqueue.lab.drain", "shut_down vs shut_down_with_drain with work in flight"),
    Command("crash", "keyqueue.lab.crash", "worker processes on a Redis queue, one SIGKILLed mid-key: its lease runs "
            "out, the key is handed out again, nothing is lost"),
    Command(
        "apiserver",
        "keyqueue.apiserver.cli",
        "a Kubernetes-API-compatible test server (ConfigMaps, Namespaces, Events, Leases, CRDs) on etcd, not "
        "kube-apiserver",
    ),
    Command("redis", "keyqueue.lab.redis_cli", "a throwaway redis-server to share keyqueue.redis queues between "
            "processes, until Ctrl-C"),
    Command("pipeline", "keyqueue.lab.pipeline_cli", "API write → watch → informer → queue → worker, timed per stage"),
    Command("load", "keyqueue.lab.load", "a bounded load generator against the pipeline's /trigger"),
    Command("explain", "keyqueue.lab.explain", "what every counter the lab prints means, and its Prometheus "
            "series"),
    Command("failover", "keyqueue.lab.failover", "3 controller replicas with leader election on a Lease, SIGKILL of "
            "the leader mid-load: timeline, gap, lost=0, never two reconciling"),
):
    register(_command)

DEFAULT_COMMAND = "run"
