"""The build backend named in ``pyproject.toml``: setuptools' own, plus one opt-in.

With ``KEYQUEUE_MYPYC=1`` in the environment, a wheel build also asks for ``mypy`` (which ships mypyc) in its
isolated build environment, and ``setup.py`` compiles the modules listed in ``keyqueue._build.MYPYC_MODULES``.
Without it, everything is exactly ``setuptools.build_meta``: a pure-Python wheel. An editable install of the
compiled build is refused: its extension modules would land in ``src/`` and shadow the source they came from.
"""

from __future__ import annotations

import os
from typing import Any

from setuptools import build_meta as _setuptools
from setuptools.build_meta import *  # noqa: F403  (every hook not overridden below is setuptools')

#: What a compiled build needs besides setuptools (the same floor as the ``test`` extra's mypy).
MYPYC_REQUIRES = ["mypy>=1.10"]


def _mypyc_requested() -> bool:
    value = os.environ.get("KEYQUEUE_MYPYC", "")
    if value not in ("", "0", "1"):
        raise ValueError(f"KEYQUEUE_MYPYC must be 1 (compiled build) or 0 / unset (pure Python), got {value!r}")
    return value == "1"


class _NotCompiling:
    """setuptools runs ``setup.py`` for each hook; only building the wheel itself may compile (collecting the
    requirements happens before mypy is installed, and the metadata does not depend on the extensions)."""

    def __enter__(self) -> None:
        self.before = os.environ.get("KEYQUEUE_MYPYC")
        os.environ["KEYQUEUE_MYPYC"] = "0"

    def __exit__(self, *exc: object) -> None:
        if self.before is None:
            del os.environ["KEYQUEUE_MYPYC"]
        else:
            os.environ["KEYQUEUE_MYPYC"] = self.before


def get_requires_for_build_wheel(config_settings: dict[str, Any] | None = None) -> list[str]:
    extra = MYPYC_REQUIRES if _mypyc_requested() else []
    with _NotCompiling():
        return [*_setuptools.get_requires_for_build_wheel(config_settings), *extra]


def prepare_metadata_for_build_wheel(metadata_directory: str, config_settings: dict[str, Any] | None = None) -> str:
    with _NotCompiling():
        return _setuptools.prepare_metadata_for_build_wheel(metadata_directory, config_settings)


def get_requires_for_build_editable(config_settings: dict[str, Any] | None = None) -> list[str]:
    if _mypyc_requested():
        raise RuntimeError(
            "KEYQUEUE_MYPYC=1 builds a compiled wheel, which cannot be installed editable (-e): its .so files would "
            "land in src/ and shadow the source. Use `KEYQUEUE_MYPYC=1 pip install .` (without -e)."
        )
    return _setuptools.get_requires_for_build_editable(config_settings)
