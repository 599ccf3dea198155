#!/usr/bin/env bash
# The project's test command (README, CI). Creates .venv if needed, installs keyqueue with its test extra (which
# brings etcd, kubectl, redis-server, the kubernetes client, prometheus_client, mkdocs ...), then runs the checks,
# the docs build and the tests. Extra arguments go to pytest.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
.venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
echo "== ruff"
.venv/bin/ruff check src tests benchmarks
echo "== mypy --strict src/keyqueue"
.venv/bin/mypy
echo "== mkdocs build --strict"
site=$(mktemp -d)
trap 'rm -rf "$site"' EXIT
NO_MKDOCS_2_WARNING=1 .venv/bin/mkdocs build --strict --quiet --site-dir "$site"
echo "== pytest"
.venv/bin/python -m pytest "$@"
