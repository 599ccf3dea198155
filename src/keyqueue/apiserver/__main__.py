"""``python -m keyqueue.apiserver --kubeconfig PATH``: see :mod:`keyqueue.apiserver.cli`."""

import sys

from .cli import main

sys.exit(main())
