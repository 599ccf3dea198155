#!/usr/bin/env bash
# Regenerates the benchmark table of docs/performance.md: a full `python -m benchmarks` run, then
# `python -m benchmarks.docs_table` writes the table between the page's markers. The JSON report stays in
# bench-out/. Takes ~10 minutes on 2 cores; run it on an otherwise idle machine (no suite, server or helper beside it).
# Needs .venv (the README's first command or scripts/test.sh makes it).
set -euo pipefail
cd "$(dirname "$0")/.."
out=bench-out
mkdir -p "$out"
.venv/bin/python -m benchmarks --timer cpu --json "$out/report.json" > "$out/report.txt"
.venv/bin/python -m benchmarks.docs_table "$out/report.json" --write docs/performance.md
echo "docs/performance.md: table regenerated from $out/report.json"
