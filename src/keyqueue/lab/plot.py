"""The lab's access to matplotlib (the optional ``plot`` extra, imported only when a picture is drawn): whether it is
installed, which file formats it can write, and ``pyplot`` on a backend that never needs a display.

The pictures themselves are drawn next to what they show: :func:`keyqueue.lab.firehose_view.run_figure` (``run
--plot``) and :func:`keyqueue.lab.backoff.backoff_figure` (``backoff --plot``).
"""

from __future__ import annotations

import importlib.util
from typing import Any

from keyqueue.lab.common import install_line

__all__ = ["PlotUnavailable", "plot_formats", "pyplot", "require_matplotlib"]


class PlotUnavailable(RuntimeError):
    """matplotlib is not installed."""


def require_matplotlib() -> None:
    """Raise :class:`PlotUnavailable` with installation advice unless matplotlib can be imported."""
    if importlib.util.find_spec("matplotlib") is None:
        raise PlotUnavailable(
            f"--plot needs matplotlib, which is not installed; install it with: {install_line('lab')}"
        )


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the Agg backend (raises :class:`PlotUnavailable` without matplotlib)."""
    require_matplotlib()
    import matplotlib

    matplotlib.use("Agg")  # files only; never needs a display
    import matplotlib.pyplot as plt

    return plt


def plot_formats() -> list[str]:
    """The file extensions matplotlib can write (raises :class:`PlotUnavailable` without it)."""
    require_matplotlib()
    from matplotlib.figure import Figure

    return sorted(Figure().canvas.get_supported_filetypes())
