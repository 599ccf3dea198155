"""Entry point: ``python -m benchmarks`` (run from the repository root)."""

from benchmarks.runner import main

raise SystemExit(main())
