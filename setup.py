"""Only for the optional compiled build; all metadata is in ``pyproject.toml``.

``pip install .`` builds pure Python (no extension modules). ``KEYQUEUE_MYPYC=1 pip install .`` compiles the
modules named in ``src/keyqueue/_build.py``'s ``MYPYC_MODULES`` with mypyc (``MYPYC_OPT_LEVEL``, default 3, is
passed on); ``buildtools/keyqueue_backend.py`` puts mypy in the build environment for it.
"""

from __future__ import annotations

import ast
import os
from pathlib import Path

from setuptools import setup


def _mypyc_modules() -> list[str]:
    # Read the tuple from the source instead of importing the package being built.
    tree = ast.parse(Path(__file__).with_name("src").joinpath("keyqueue", "_build.py").read_text())
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "MYPYC_MODULES":
            assert node.value is not None
            return list(ast.literal_eval(node.value))
    raise RuntimeError("src/keyqueue/_build.py defines no MYPYC_MODULES")


ext_modules = []
if os.environ.get("KEYQUEUE_MYPYC") == "1":
    from mypyc.build import mypycify

    ext_modules = mypycify(
        ["src/" + m.replace(".", "/") + ".py" for m in _mypyc_modules()],
        opt_level=os.environ.get("MYPYC_OPT_LEVEL", "3"),
        group_name="keyqueue",
    )

setup(ext_modules=ext_modules)
