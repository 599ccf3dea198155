"""The served resources: their types, schema, decoding, validation and table form.

This package holds the per-resource rules that kube-apiserver gets from its type definitions and registry
strategies, restricted to ConfigMaps, Namespaces and Events (core ``v1``), Events (``events.k8s.io/v1``, stored as
core Events), Leases (``coordination.k8s.io/v1``), CustomResourceDefinitions, the self access reviews (answered,
never stored), and the built-in kinds operators create and watch (Pods, Services, Deployments, Jobs, RBAC, ...),
whose field specs come from the official client's models.  A type is a :class:`ResourceType` plus its field
spec; the registry, the routes, discovery and OpenAPI are generic over them.

The package, each module importing only those listed before it:

* :mod:`.resources`: :class:`ResourceType`, the built-in types, the type a renamed version is stored as, and the
  value a field selector compares;
* :mod:`.schemas`: the field spec of each built-in type, and the canonical field order it gives (equal objects
  encode to equal bytes, so a no-op update is detected by comparing bytes, as kube-apiserver does);
* :mod:`.times`: ``metav1.Time`` and ``MicroTime`` strings, and ages as kubectl shows them;
* :mod:`.codec`: a JSON body decoded into its type's shape, as Go's ``encoding/json`` does (unknown fields dropped
  and reported for ``fieldValidation``, ``null`` unset, empty ``omitempty`` fields dropped, a value of the wrong
  JSON type a 400 error), and the conversion between the stored and the served form;
* :mod:`.validity`: the 422 Invalid checks: object names, ConfigMap keys, labels, annotations, immutable
  ConfigMaps, immutable ``metadata.uid``, Lease durations and transitions;
* :mod:`.tables`: the ``meta.k8s.io/v1`` Table form kubectl asks for.

Between them, for the built-in kinds with client-model specs: :mod:`.models` (the specs, derived from the
client's models, before :mod:`.schemas`), :mod:`.defaults` (kube's ``SetDefaults_*``), :mod:`.strategy` (status
subresource, generation, a Job's selector, a Service's cluster IP), :mod:`.kind_validity` (their 422 checks,
before :mod:`.validity`), :mod:`.webhook_validity` (the admission webhook configurations' 422 checks, before
:mod:`.validity`), :mod:`.scale` (the ``/scale`` subresource's Scale) and :mod:`.printers` (their Table
columns, before :mod:`.tables`).
"""

from .codec import decode_meta, decode_typed, from_stored, to_stored
from .resources import (
    BUILTINS,
    CONFIGMAPS,
    CRDS,
    EVENTS,
    EVENTS_V1,
    LEASES,
    MUTATING_WEBHOOK_CONFIGURATIONS,
    NAMESPACES,
    RETURNS_DELETED,
    REVIEWS,
    SELF_SUBJECT_ACCESS_REVIEWS,
    SELF_SUBJECT_REVIEWS,
    SELF_SUBJECT_RULES_REVIEWS,
    VALIDATING_WEBHOOK_CONFIGURATIONS,
    WEBHOOK_CONFIGURATIONS,
    ResourceType,
    field_value,
    stored_type,
)
from .scale import scale_of, scale_replicas
from .schemas import canonical, schema_of
from .strategy import prepare_builtin
from .tables import to_table
from .times import age, format_time, normalize_time, parse_time
from .validity import MAX_ANNOTATION_BYTES, MAX_CONFIGMAP_BYTES, invalid_kind, validate, validate_update

__all__ = [
    "BUILTINS",
    "CONFIGMAPS",
    "CRDS",
    "EVENTS",
    "EVENTS_V1",
    "LEASES",
    "MAX_ANNOTATION_BYTES",
    "MAX_CONFIGMAP_BYTES",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "NAMESPACES",
    "RETURNS_DELETED",
    "REVIEWS",
    "SELF_SUBJECT_ACCESS_REVIEWS",
    "SELF_SUBJECT_REVIEWS",
    "SELF_SUBJECT_RULES_REVIEWS",
    "VALIDATING_WEBHOOK_CONFIGURATIONS",
    "WEBHOOK_CONFIGURATIONS",
    "ResourceType",
    "age",
    "canonical",
    "decode_meta",
    "decode_typed",
    "field_value",
    "format_time",
    "from_stored",
    "invalid_kind",
    "normalize_time",
    "parse_time",
    "prepare_builtin",
    "scale_of",
    "scale_replicas",
    "schema_of",
    "stored_type",
    "to_stored",
    "to_table",
    "validate",
    "validate_update",
]
