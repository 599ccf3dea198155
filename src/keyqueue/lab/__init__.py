"""The keyqueue lab (``keyqueue-lab``): runs that make the queue's promises visible and measured.

Subcommands (see :mod:`keyqueue.lab.commands`): ``run`` (the firehose, default), ``dedup``, ``race``,
``backoff``, ``drain``, ``explain`` (the glossary); ``apiserver``, ``pipeline`` and ``load`` come from other
modules. :mod:`keyqueue.lab.funnel` draws the queue's funnel for ``run``'s live view and the pipeline's
(:mod:`keyqueue.lab.pipeline_view`). Each built-in
subcommand module also offers a function returning a result object, for tests and other tools:
:func:`keyqueue.lab.race.run_race`, :func:`keyqueue.lab.firehose.run_firehose`,
:func:`keyqueue.lab.dedup.run_dedup`, :func:`keyqueue.lab.backoff.run_backoff`, :func:`keyqueue.lab.drain.run_drain`.
"""

from keyqueue.lab.common import format_duration, parse_duration

__all__ = ["format_duration", "parse_duration"]
