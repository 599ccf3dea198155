"""Which build of keyqueue this is: pure Python (the default) or the optional mypyc-compiled build of the same source.

``KEYQUEUE_MYPYC=1 pip install .`` compiles the modules in :data:`MYPYC_MODULES` with mypyc (``setup.py`` reads the
tuple from this file, so the list exists once); every other module, and every module of a plain ``pip install``,
stays interpreted. The compiled modules are the same source: only speed changes.

This module itself is never compiled: it is the one place that knows, at run time, which modules are extensions.
"""

from __future__ import annotations

import importlib
import importlib.machinery
import importlib.util
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Final

__all__ = ["MYPYC_MODULES", "BuildInfo", "build_info", "mypyc_attr"]

#: The modules the compiled build compiles: the queue's state machine; the shells (``_shell``: what both share,
#: ``_threaded`` and ``_aio``: each shell's queues), whose classes that combine mixins by multiple inheritance stay
#: in the interpreted public modules (``threaded``, ``aio``, ``_delayed``); the rate limiters (their arguments are
#: typed ``object`` and checked by keyqueue, so both builds raise the same errors); and the metrics' fold of
#: buffered durations into the histogram buckets (a pure function over lists of ints). Every other module stays
#: interpreted, each for a reason the README's "The compiled build" gives (``RealClock`` needs a class attribute a
#: native class cannot have; the priority core relies on tuple identity, which mypyc's unboxed tuples lose; ...).
MYPYC_MODULES: Final = (
    "keyqueue._core",
    "keyqueue._shell",
    "keyqueue._threaded",
    "keyqueue._aio",
    "keyqueue.ratelimit",
    "keyqueue.metrics._buckets",
)

if TYPE_CHECKING:
    from mypy_extensions import mypyc_attr as mypyc_attr
else:

    def mypyc_attr(*attrs: Any, **kwattrs: Any) -> Any:
        """mypyc reads ``@mypyc_attr(...)`` from the source at compile time and a compiled class never calls it;
        in the pure build it is this no-op, so that ``mypy_extensions`` is not needed at run time."""
        return lambda cls: cls


@dataclass(frozen=True)
class BuildInfo:
    """What :func:`build_info` reports. ``compiled``: the modules of :data:`MYPYC_MODULES` that are loaded from a
    compiled extension; ``interpreted``: those loaded from Python source (all of them in the default build)."""

    compiled: tuple[str, ...]
    interpreted: tuple[str, ...]

    @property
    def kind(self) -> str:
        """``"mypyc"`` if every module of :data:`MYPYC_MODULES` is compiled, ``"pure"`` if none is, else ``"mixed"``
        (a broken install: some ``.so`` files missing or shadowed)."""
        if not self.compiled:
            return "pure"
        return "mypyc" if not self.interpreted else "mixed"


def _is_extension(module: str) -> bool:
    # The module that is loaded, if it is (sys.modules), else the one an import would load, found without
    # importing it (keyqueue._aio would import asyncio, which `import keyqueue` must not).
    loaded = sys.modules.get(module)
    if loaded is not None:
        origin = getattr(loaded, "__file__", None) or ""
    else:
        spec = importlib.util.find_spec(module)
        origin = (spec.origin if spec is not None else None) or ""
    return origin.endswith(tuple(importlib.machinery.EXTENSION_SUFFIXES))


def build_info() -> BuildInfo:
    """Which of :data:`MYPYC_MODULES` this interpreter runs compiled: the file of each loaded module, or of the one an
    import would load (found without importing it), so it reports what really runs, not how the package was asked
    to be built."""
    compiled = tuple(m for m in MYPYC_MODULES if _is_extension(m))
    return BuildInfo(compiled, tuple(m for m in MYPYC_MODULES if m not in compiled))
