#!/usr/bin/env bash
# The project's test command (README, CI). Creates .venv if needed, installs keyqueue with its test extra (which
# brings etcd, kubectl, redis-server, the kubernetes client, prometheus_client, mkdocs ...), then runs the checks,
# the docs build and the tests, then the Redis tests against Redis 7 (scripts/redis7.sh). Extra arguments go to
# pytest (and skip the Redis 7 leg).
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
# The Redis suite once more on the other server users run: Debian's Redis 7 (scripts/redis7.sh unpacks it into a
# cache folder; nothing is installed). Only for a full run (no pytest arguments); KEYQUEUE_REDIS7=0 skips it.
if [ $# -eq 0 ] && [ "${KEYQUEUE_REDIS7:-1}" != 0 ]; then
  echo "== pytest tests/redis on Redis 7"
  redis7=$(scripts/redis7.sh)  # fails the run if Redis 7 cannot be had (never a silent fallback to 6.2)
  KEYQUEUE_REDIS_SERVER="$redis7" .venv/bin/python -m pytest tests/redis
fi
