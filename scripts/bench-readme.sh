#!/usr/bin/env bash
# Regenerates the README's benchmark table: a full `python -m benchmarks` run on the default (pure) build, the
# per-operation rows again on the compiled build (.venv-mypyc, built here as scripts/test.sh builds it), then
# `python -m benchmarks.readme_table` writes the table between the README's markers. Both JSON reports stay in
# bench-out/ (pure.json, compiled.json). Takes ~15 minutes on 2 cores; run it on an otherwise idle machine.
# Needs .venv (the README's first command or scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench-out
mkdir -p "$out"
TIMER=(--timer cpu)
# The rows that depend on the compiled modules (the core, the shells, the limiters) and their baselines.
COMPILED_ROWS='^(add\.dedup|add\.new|cycle|cycle\.no_busy_check|iter|bulk|bulk\.mem|delay\.real|delay\.fake|ratelimited|ratelimited\.default|metrics\.cycle|metrics\.hooks|metrics\.dedup|metrics\.noop|aio\.cycle|aio\.iter|aio\.loop_cycle|aio\.loop_iter|prio\.cycle|workers|wakeup|firehose|race|race\.control|base\.floor|base\.metrics_floor|scale\..*)$'

echo "== pure build: the full run"
.venv/bin/python -m benchmarks "${TIMER[@]}" --json "$out/pure.json" > "$out/pure.txt"

echo "== compiled build into .venv-mypyc"
./scripts/build-mypyc.sh

echo "== compiled build: the rows of the compiled module"
.venv-mypyc/bin/python -m benchmarks "${TIMER[@]}" --only "$COMPILED_ROWS" --json "$out/compiled.json" \
  > "$out/compiled.txt"

.venv/bin/python -m benchmarks.readme_table "$out/pure.json" --compiled "$out/compiled.json" --write README.md
echo "README.md: table regenerated from $out/pure.json and $out/compiled.json"
