"""Which build is under test (issue 18): the default pure-Python build, or the optional mypyc-compiled one.

``scripts/test.sh`` runs the whole suite on the pure build in ``.venv`` (this file expects ``pure`` there) and then
the core suites on the compiled wheel in ``.venv-mypyc`` with ``KEYQUEUE_EXPECT_BUILD=mypyc``: if the modules there
are not really compiled (a pure wheel, or ``src/`` shadowing the installed package), this file fails.
"""

from __future__ import annotations

import importlib
import importlib.util
import os
import sys
from pathlib import Path
from typing import Any

import pytest

import keyqueue
from keyqueue._build import MYPYC_MODULES, _is_extension

EXPECTED = os.environ.get("KEYQUEUE_EXPECT_BUILD", "pure")
SRC = Path(__file__).resolve().parent.parent / "src"


def test_the_build_under_test_is_the_expected_one() -> None:
    info = keyqueue.build_info()
    assert EXPECTED in ("pure", "mypyc"), f"KEYQUEUE_EXPECT_BUILD must be pure or mypyc, got {EXPECTED!r}"
    assert info.kind == EXPECTED, info
    assert keyqueue.COMPILED is (EXPECTED == "mypyc")
    if EXPECTED == "mypyc":
        assert info.compiled == MYPYC_MODULES and not info.interpreted
        for name in MYPYC_MODULES:
            path = Path(importlib.import_module(name).__file__ or "")
            assert path.suffix == ".so" or path.name.endswith(".pyd"), path
            assert SRC not in path.parents, f"{name} loaded from the source tree ({path}), not the installed wheel"
    else:
        assert info.compiled == () and info.interpreted == MYPYC_MODULES


def test_the_detector_tells_an_extension_from_python_source() -> None:
    # Controls for the check above: a module the interpreter loads from a shared library is reported compiled, a
    # module loaded from source is not. (_json is a shared library in lib-dynload on a standard CPython build.)
    import _json

    if getattr(_json, "__file__", None) is not None:
        assert _is_extension("_json")
    assert not _is_extension("keyqueue._build")  # never compiled, in either build
    assert not _is_extension("json")
    assert sys.modules["keyqueue._build"].__file__.endswith(".py")  # type: ignore[union-attr]


def _backend() -> Any:
    spec = importlib.util.spec_from_file_location("keyqueue_backend", SRC.parent / "buildtools" / "keyqueue_backend.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("value", [None, "0", "1"])
def test_the_build_backend_asks_for_mypy_only_when_the_compiled_build_is_requested(
    value: str | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    backend = _backend()
    seen: list[str | None] = []

    def setuptools_requires(config_settings: object = None) -> list[str]:
        seen.append(os.environ.get("KEYQUEUE_MYPYC"))  # setuptools runs setup.py here: it must not compile
        return ["from-setuptools"]

    monkeypatch.setattr(backend._setuptools, "get_requires_for_build_wheel", setuptools_requires)
    if value is None:
        monkeypatch.delenv("KEYQUEUE_MYPYC", raising=False)
    else:
        monkeypatch.setenv("KEYQUEUE_MYPYC", value)
    requires = backend.get_requires_for_build_wheel()
    assert requires[0] == "from-setuptools"
    assert ("mypy>=1.10" in requires) is (value == "1")
    assert seen == ["0"]
    assert os.environ.get("KEYQUEUE_MYPYC") == value  # restored


def test_the_build_backend_refuses_a_compiled_editable_install_and_a_bad_value(monkeypatch: pytest.MonkeyPatch) -> None:
    backend = _backend()
    monkeypatch.setenv("KEYQUEUE_MYPYC", "1")
    with pytest.raises(RuntimeError, match="cannot be installed editable"):
        backend.get_requires_for_build_editable()
    monkeypatch.setenv("KEYQUEUE_MYPYC", "yes")
    with pytest.raises(ValueError, match="KEYQUEUE_MYPYC must be 1"):
        backend.get_requires_for_build_wheel()
