"""What a delete's ``propagationPolicy`` asks of the garbage collector: the finalizers it owns (``orphan``,
``foregroundDeletion``) and which of them a deleted object keeps (:func:`deletion_finalizers`).

The registry sets them on a delete (:meth:`~.registry.Registry.delete`); the collector (:mod:`.gc`) acts on them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Final

__all__ = ["FOREGROUND", "GC_FINALIZERS", "ORPHAN", "deletion_finalizers"]

#: The finalizers kube's garbage collector owns (``metav1.FinalizerOrphanDependents``/``FinalizerDeleteDependents``).
ORPHAN: Final = "orphan"
FOREGROUND: Final = "foregroundDeletion"
GC_FINALIZERS: Final = (ORPHAN, FOREGROUND)


def deletion_finalizers(finalizers: Iterable[str] | None, policy: str) -> list[str]:
    """The finalizers an object keeps when deleted with ``policy``: unset keeps the GC finalizers it has;
    ``Orphan`` and ``Foreground`` make sure of theirs (and drop the other); ``Background`` drops both (kube's
    ``deletionFinalizersForGarbageCollection``)."""
    existing = list(finalizers or ())
    if not policy:
        return existing
    wanted = {"Orphan": ORPHAN, "Foreground": FOREGROUND}.get(policy)
    out = [f for f in existing if f not in GC_FINALIZERS or f == wanted]
    if wanted is not None and wanted not in out:
        out.append(wanted)
    return out
