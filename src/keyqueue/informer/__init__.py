"""A list-watch informer for the official ``kubernetes`` client, feeding keyqueue queues.

::

    informer = Informer.for_config_maps(api_client, "default", resync_period=30)
    queue = keyqueue.RateLimitingQueue()
    informer.add_event_handler(
        on_add=lambda obj: queue.add(meta_namespace_key(obj)),
        on_update=lambda old, new: queue.add(meta_namespace_key(new)),
        on_delete=lambda obj: queue.add(meta_namespace_key(obj)),   # obj may be a DeletedFinalStateUnknown
    )
    informer.start()
    informer.wait_for_cache_sync(timeout=10)

See :mod:`keyqueue.informer.informer` for what the informer does on stream ends, errors and 410 Gone.
"""

from keyqueue.informer.informer import Backoff, HandlerRegistration, Informer, InformerStats
from keyqueue.informer.store import (
    NAMESPACE_INDEX,
    DeletedFinalStateUnknown,
    IndexFunc,
    KeyFunc,
    Obj,
    Store,
    deletion_handling_key,
    meta_namespace_index,
    meta_namespace_key,
    split_meta_namespace_key,
)

__all__ = [
    "NAMESPACE_INDEX",
    "Backoff",
    "DeletedFinalStateUnknown",
    "HandlerRegistration",
    "IndexFunc",
    "Informer",
    "InformerStats",
    "KeyFunc",
    "Obj",
    "Store",
    "deletion_handling_key",
    "meta_namespace_index",
    "meta_namespace_key",
    "split_meta_namespace_key",
]
