"""``keyqueue-lab`` / ``python -m keyqueue.lab``: dispatch to a subcommand (``run`` when none is given), after checking
that its output paths (``--json``, ``--plot``) can be written."""

from __future__ import annotations

import argparse
import importlib.metadata
import os
import sys
from pathlib import Path

from keyqueue.lab.commands import COMMANDS, DEFAULT_COMMAND, CommandUnavailable
from keyqueue.lab.common import EXIT_INTERRUPTED
from keyqueue.lab.plot import PlotUnavailable, plot_formats

__all__ = ["main"]

_PROG = "keyqueue-lab"


def _top_help() -> str:
    width = max(len(name) for name in COMMANDS)
    lines = [
        f"usage: {_PROG} [COMMAND] [options]",
        "",
        "Make client-go's workqueue promises visible and measured: each key is processed by one worker at a",
        "time, never lost, never duplicated.",
        "",
        "commands:",
    ]
    for name, command in COMMANDS.items():
        default = " [default]" if name == DEFAULT_COMMAND else ""
        lines.append(f"  {name:<{width}}  {command.summary}{default}")
    lines += ["", f"'{_PROG} COMMAND --help' shows a command's options; with no command, '{DEFAULT_COMMAND}' runs.",
              f"'{_PROG} --version' prints the version."]
    return "\n".join(lines)


def _version() -> str:
    """The installed distribution's version (the package's own ``__version__`` when run from a bare tree)."""
    try:
        return importlib.metadata.version("keyqueue")
    except importlib.metadata.PackageNotFoundError:
        import keyqueue

        return keyqueue.__version__


def _check_writable(option: str, path: str) -> str | None:
    target = Path(path)
    if target.is_dir():
        return f"{option} {path}: is a directory; give a file name"
    parent = target.parent if str(target.parent) else Path(".")
    if not parent.exists():
        return f"{option} {path}: the directory {str(parent)!r} does not exist"
    if not parent.is_dir():
        return f"{option} {path}: {str(parent)!r} is not a directory"
    if not os.access(parent, os.W_OK | os.X_OK) or (target.exists() and not os.access(target, os.W_OK)):
        return f"{option} {path}: not writable"
    return None


def _check_output_paths(args: argparse.Namespace) -> str | None:
    """Check the run's output options before it starts: ``--json PATH`` (``-`` is stdout) and ``--plot FILE``.

    Returns a one-line message for the first problem (a missing or non-writable directory, a path that is a
    directory, a plot format matplotlib cannot write, matplotlib missing), or ``None`` when every path can be
    written. Creates nothing.
    """
    json_path = getattr(args, "json", None)
    if json_path is not None and json_path != "-":
        problem = _check_writable("--json", json_path)
        if problem is not None:
            return problem
    plot_path = getattr(args, "plot", None)
    if plot_path is not None:
        problem = _check_writable("--plot", plot_path)
        if problem is not None:
            return problem
        try:
            formats = plot_formats()
        except PlotUnavailable as exc:
            return str(exc)
        suffix = Path(plot_path).suffix.lstrip(".").lower()
        if suffix not in formats:
            shown = f"'.{suffix}' is not" if suffix else "a file name without an extension is not"
            return f"--plot {plot_path}: {shown} a format matplotlib can write; use one of: {', '.join(formats)}"
    return None


def main(argv: list[str] | None = None) -> int:
    """Run the lab with ``argv`` (default ``sys.argv[1:]``) and return the exit status.

    The first argument names the subcommand; if it is missing or starts with ``-`` (other than ``-h``), ``run``
    is used with all arguments. Unknown subcommand, bad options, or an output path (``--json``, ``--plot``) that
    cannot be written: a one-line message and status 2, before anything runs. A subcommand whose module or one of
    its packages is missing: a message naming the install command, status 2. Interrupted (Ctrl-C): status 130
    (:data:`~keyqueue.lab.common.EXIT_INTERRUPTED`), after the subcommand's summary so far where it has one.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    if args and args[0] in ("-h", "--help", "help"):
        print(_top_help())
        return 0
    if args and args[0] in ("-V", "--version"):
        print(f"{_PROG} {_version()}")
        return 0
    if not args or args[0].startswith("-"):
        name, rest = DEFAULT_COMMAND, args
    else:
        name, rest = args[0], args[1:]
    command = COMMANDS.get(name)
    if command is None:
        print(f"{_PROG}: unknown command {name!r}; choose from: {', '.join(COMMANDS)}", file=sys.stderr)
        return 2
    try:
        loaded = command.load()
    except CommandUnavailable as exc:
        print(f"{_PROG}: {exc}", file=sys.stderr)
        return 2
    parser = argparse.ArgumentParser(
        prog=f"{_PROG} {name}", description=command.summary,
        epilog=None if name == "explain" else f"What the counters mean and how they map to Prometheus series: "
        f"'{_PROG} explain [TERM]'. Ctrl-C ends a run early with exit status 130, after the summary of what ran "
        "where the command has one.",
    )
    loaded.add_arguments(parser)
    try:
        namespace = parser.parse_args(rest)
        problem = _check_output_paths(namespace)
        if problem is not None:
            print(f"{_PROG} {name}: {problem}", file=sys.stderr)
            return 2
        return int(loaded.run(namespace))
    except SystemExit as exc:  # argparse errors and --help; keep main() a function that returns
        code = exc.code
        return code if isinstance(code, int) else (0 if code is None else 2)
    except KeyboardInterrupt:
        print(f"{_PROG}: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # `keyqueue-lab ... | head`: the reader left; say nothing more
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())  # so that the interpreter's final flush does not complain
        return 141


if __name__ == "__main__":
    sys.exit(main())
