"""The Manager: many controllers, one shared informer (and cache) per resource, one leader election, metrics and
health probes — controller-runtime's shape for Python.

:class:`Manager` runs threads; :class:`keyqueue.aio.Manager` runs on an asyncio event loop. Resources are named
``"group/version/plural"`` and resolved through discovery (:mod:`keyqueue.manager.resources`); controllers are
wired to informers as :mod:`keyqueue.manager.wiring` describes; :mod:`keyqueue.predicates` filters updates.
"""

from keyqueue.manager.cache import Cache, SharedInformer, parse_label_selector
from keyqueue.manager.resources import Resource, ResourceResolver, UnknownResource, parse_resource
from keyqueue.manager.threaded import Manager
from keyqueue.manager.wiring import MapFunc, owner_key

__all__ = [
    "Cache",
    "Manager",
    "MapFunc",
    "Resource",
    "ResourceResolver",
    "SharedInformer",
    "UnknownResource",
    "owner_key",
    "parse_label_selector",
    "parse_resource",
]
