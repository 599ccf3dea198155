"""A griffe extension for the docs build: the docstrings' Sphinx roles (``:class:`~keyqueue.Queue```) shown as code
(`Queue`), since the site renders docstrings as Markdown."""

from __future__ import annotations

import re
from typing import Any

from griffe import Extension

_ROLE = re.compile(r":(?:class|meth|func|mod|data|attr|exc|obj):`(~?)([^`]+)`")


def _code(match: re.Match[str]) -> str:
    short, target = match.group(1), match.group(2)
    return f"`{target.rsplit('.', 1)[-1] if short else target}`"


class SphinxRoles(Extension):
    def on_object(self, *, obj: Any, **kwargs: Any) -> None:
        if obj.docstring is not None:
            obj.docstring.value = _ROLE.sub(_code, obj.docstring.value).replace("``", "`")
