"""The options of a pipeline run."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["PipelineConfig"]


@dataclass
class PipelineConfig:
    """Options of a :class:`~keyqueue.lab.pipeline.Pipeline` (``keyqueue-lab pipeline``'s flags)."""

    port: int = 0  #: the trigger server's port on 127.0.0.1 (0 = a free port)
    workers: int = 4
    backend: str = "etcd"  #: "etcd" or "memory" (ignored with kubeconfig)
    kubeconfig: str | None = None  #: use this cluster instead of starting the test API server
    namespace: str = "default"
    reconcile: float = 0.002  #: seconds of simulated work per reconcile (a GIL-releasing sleep)
    log_lines: int = 10  #: per-event log lines printed per kind; -1 = all, 0 = none
    stats_interval: float = 5.0  #: seconds between [STATS] lines while serving; 0 = only at the end
    unsafe_no_fsync: bool = False  #: start etcd with --unsafe-no-fsync (faster, not durable; in-process server only)
    apiserver_process: bool = False  #: run the test API server in a child process (its own GIL) instead of here
    #: serve ``POST /trigger`` from a child process of its own (:mod:`keyqueue.lab.trigger_process`) instead of this
    #: process's loop; needs ``apiserver_process`` or ``kubeconfig`` (the child reads the kubeconfig)
    trigger_process: bool = False
    switch_interval: float | None = None  #: sys.setswitchinterval while running (None: leave the interpreter's)
