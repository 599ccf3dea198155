"""keyqueue's benchmarks: ``python -m benchmarks [--smoke] [--json PATH] [--plot PNG] [--only PATTERN]``.

Every row and every baseline is measured in one process, in one run, on the same machine, and printed side by side
with its target (see ``benchmarks/README.md``). Not part of the package and not in the default test run; the smoke
mode is (``tests/test_benchmarks_smoke.py``).
"""
