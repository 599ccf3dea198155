"""Object storage with kube-apiserver's semantics, on any :class:`~.storage.Backend`.

Layout and concurrency follow kube-apiserver's etcd3 storage:

* key ``<prefix>/<resource>/<namespace>/<name>`` (``<prefix>/namespaces/<name>``
  for namespaces), value = the object as JSON without ``resourceVersion``;
* an object's ``resourceVersion`` is its key's ``mod_revision``; a list's is the
  revision it was read at;
* create is a transaction on ``version == 0`` (else 409 AlreadyExists);
* update and patch are a transaction on ``mod_revision`` from the newest state
  this registry saw for the key (its own writes, its reads and the watch events
  it delivered; decoded once and shared), with a read from the backend only when
  there is none, when the compare fails, or before an answer that a stale state
  could get wrong (an error, a no-op): one etcd round trip in the common case, as
  kube-apiserver's ``GuaranteedUpdate`` with its watch cache.
  When the client gave a ``resourceVersion`` (in a PUT body or inside a patch)
  a mismatch is 409 Conflict; without one the read-modify-write is retried
  until it wins (kube-apiserver's ``GuaranteedUpdate``).  An update that does not
  change the stored bytes writes nothing and keeps the resourceVersion;
* watch = a backend watch from ``resourceVersion + 1``; ADDED or MODIFIED is
  decided from ``create_revision``; DELETED carries the last state with the
  deletion's revision; a compacted start revision gives a 410 Expired ERROR event.

Finalizers as kube-apiserver's generic store handles them: deleting an object
with ``metadata.finalizers`` only sets ``deletionTimestamp`` and
``deletionGracePeriodSeconds`` (0); no finalizer may be added afterwards; the
update that removes the last one deletes the object instead of writing it.

A delete's ``propagationPolicy`` sets the garbage collector's finalizers (``orphan``, ``foregroundDeletion``:
:mod:`.propagation`); the collector thread of :mod:`.gc` acts on them and on ``ownerReferences``.

Every write passes admission (:mod:`~keyqueue.apiserver.admission`): the mutating webhooks before the object is
checked against its schema (and its CRD's CEL rules), the ValidatingAdmissionPolicies and the validating webhooks
after.

Differences from kube-apiserver, on purpose: no in-tree admission plugins beyond the namespace-exists check, no watch
cache for lists and gets (they read the backend; its watches are shared instead: the registry asks the backend to
serve all of them, the garbage collector's included, from one stream, :meth:`~.storage.Backend.share_watches`), and
a namespace's deletion is done within the DELETE call (no namespace controller):
the namespace is marked ``Terminating`` (creates in it are then refused with
403 ``NamespaceTerminating``; every create's transaction also requires the
namespace's ``mod_revision`` it checked, so none slips in), its objects are
deleted (those with finalizers marked), then the namespace -- at once if it is
empty, else by the delete of its last object.

The package, each module importing only those listed before it:

* :mod:`.options`: what a request brings: :class:`WriteOptions`, :class:`Matcher`, its ``resourceVersion``;
* :mod:`.states`: the stored and the API form of an object, and the newest state seen per key (decoded once);
* :mod:`.objectwatch`: :class:`ObjectWatch`, the events of one watch request;
* :mod:`.base`: what every part stands on: the key layout, encoding and decoding, reading one object;
* :mod:`.listwatch`: lists (resourceVersion rules, pages, continue tokens) and opening watches;
* :mod:`.namespace_lifecycle`: creates refused in a terminating namespace, a namespace's deletion and finalizers;
* :mod:`.crd_lifecycle`: a CRD's strategy, serving its versions, and its deletion with its objects;
* :mod:`.server_side_apply`: server-side apply (an object, its ``status``, a workload's ``scale``) on the write path;
* :mod:`.writes`: :class:`Registry`, assembled from the above, and the write path: create, update, patch and
  delete with their preconditions, finalizers and ``GuaranteedUpdate`` loop.
"""

from .objectwatch import ObjectWatch
from .options import MAX_RESOURCE_VERSION, SYSTEM_NAMESPACES, Matcher, WriteOptions, parse_resource_version
from .writes import Registry

__all__ = ["MAX_RESOURCE_VERSION", "SYSTEM_NAMESPACES", "Matcher", "ObjectWatch", "Registry", "WriteOptions",
           "parse_resource_version"]
