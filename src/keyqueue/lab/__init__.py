"""The keyqueue lab (``keyqueue-lab``): runs that make the queue's promises visible and measured.

The lab depends on keyqueue; nothing in keyqueue imports the lab. :mod:`keyqueue.lab.__main__` dispatches to the
subcommands registered in :mod:`keyqueue.lab.commands`, each a module with ``add_arguments`` and ``run``: ``run``
(:mod:`~keyqueue.lab.firehose_cli`, the default), ``dedup``, ``race`` (with ``--backend redis``:
:mod:`~keyqueue.lab.race_redis`), ``backoff``, ``drain``, ``crash``, ``failover``, ``load``, ``explain`` (the
glossary), ``pipeline`` (:mod:`~keyqueue.lab.pipeline_cli`), ``redis`` (:mod:`~keyqueue.lab.redis_cli`);
``apiserver`` comes from :mod:`keyqueue.apiserver`. Helpers every subcommand shares are in
:mod:`~keyqueue.lab.common`; matplotlib is reached through :mod:`~keyqueue.lab.plot` only.

The larger subcommands are split by concept under a common prefix: ``firehose`` (the run), ``firehose_log``,
``firehose_view``, ``firehose_cli``; ``pipeline`` (the :class:`~keyqueue.lab.pipeline.Pipeline`),
``pipeline_recorder``, ``pipeline_stages``, ``pipeline_report``, ``pipeline_view``, ``pipeline_apiserver``,
``pipeline_config``, ``pipeline_cli``, with the trigger's side in ``api_writer``, ``trigger_server`` and
``trigger_process``. :mod:`~keyqueue.lab.funnel` draws the queue's funnel for ``run``'s live view and the pipeline's.

Each subcommand also offers a function returning a result object, for tests and other tools:
:func:`keyqueue.lab.race.run_race`, :func:`keyqueue.lab.race_redis.run_redis_race`,
:func:`keyqueue.lab.firehose.run_firehose`, :func:`keyqueue.lab.dedup.run_dedup`,
:func:`keyqueue.lab.backoff.run_backoff`, :func:`keyqueue.lab.drain.run_drain`.
"""

from keyqueue.lab.common import format_duration, parse_duration

__all__ = ["format_duration", "parse_duration"]
