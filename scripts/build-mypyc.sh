#!/usr/bin/env bash
# Builds the optional compiled build (KEYQUEUE_MYPYC=1 wheel) with .venv's own tools and installs it, non-editable
# (so no .so file lands in src/), into .venv-mypyc with the core-test extra. Used by scripts/test.sh and
# scripts/bench-readme.sh; needs .venv (made by scripts/test.sh or the README's first command).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
wheels=$(mktemp -d)
trap 'rm -rf "$wheels"' EXIT
rm -rf build  # no stale objects or modules from an earlier build in the wheel
KEYQUEUE_MYPYC=1 .venv/bin/python -m pip wheel --quiet --disable-pip-version-check --no-build-isolation --no-deps \
  -w "$wheels" .
if [ ! -x .venv-mypyc/bin/python ]; then
  "$PY" -m venv .venv-mypyc
fi
wheel=$(ls "$wheels"/keyqueue-*.whl)
.venv-mypyc/bin/python -m pip install --quiet --disable-pip-version-check "$wheel[core-test]"
.venv-mypyc/bin/python -m pip install --quiet --disable-pip-version-check --force-reinstall --no-deps "$wheel"
