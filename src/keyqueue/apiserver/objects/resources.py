"""The served resources: :class:`ResourceType` and the built-in types.

A type names its resource, kind, group and version, its verbs, and the field selectors it accepts; the registry,
the routes, discovery and OpenAPI are generic over it.  Also here: the type a renamed version is stored as
(:func:`stored_type`) and the value a field selector compares (:func:`field_value`), both read from the type alone.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

from ..custom import CustomSchema

__all__ = [
    "ADMISSION_POLICY_KINDS",
    "BUILTINS",
    "CLUSTER_ROLES",
    "CLUSTER_ROLE_BINDINGS",
    "CONFIGMAPS",
    "CRDS",
    "CRONJOBS",
    "DAEMONSETS",
    "DEPLOYMENTS",
    "ENDPOINTS",
    "ENDPOINT_SLICES",
    "EVENTS",
    "EVENTS_V1",
    "INGRESSES",
    "JOBS",
    "LEASES",
    "MUTATING_WEBHOOK_CONFIGURATIONS",
    "NAMESPACES",
    "PDBS",
    "PODS",
    "PVCS",
    "REPLICASETS",
    "RETURNS_DELETED",
    "REVIEWS",
    "ROLES",
    "ROLE_BINDINGS",
    "SECRETS",
    "SELF_SUBJECT_ACCESS_REVIEWS",
    "SELF_SUBJECT_REVIEWS",
    "SELF_SUBJECT_RULES_REVIEWS",
    "SERVICES",
    "SERVICE_ACCOUNTS",
    "STATEFULSETS",
    "VALIDATING_ADMISSION_POLICIES",
    "VALIDATING_ADMISSION_POLICY_BINDINGS",
    "VALIDATING_WEBHOOK_CONFIGURATIONS",
    "WEBHOOK_CONFIGURATIONS",
    "WORKLOAD_KINDS",
    "ResourceType",
    "field_value",
    "stored_type",
]


@dataclass(frozen=True, slots=True)
class ResourceType:
    """A served resource: ``GET /api/v1/[namespaces/NS/]<name>`` for the core group (``group == ""``),
    ``GET /apis/<group>/<version>/[namespaces/NS/]<name>`` otherwise."""

    name: str
    singular: str
    kind: str
    namespaced: bool
    short_names: tuple[str, ...]
    field_selectors: frozenset[str]
    group: str = ""
    version: str = "v1"
    #: The verbs served (``deletecollection`` is added for namespaced types that serve ``delete``).  A type that
    #: serves only ``create`` is a review: it is answered, never stored (:data:`REVIEWS`).
    verbs: tuple[str, ...] = ("create", "delete", "get", "list", "patch", "update", "watch")
    #: ``(stored field, served field)`` pairs of top-level fields: a type that shares its storage with another
    #: version (``events.k8s.io/v1`` Events are stored as core ``v1`` Events) is converted on every read and
    #: write by renaming these fields (:func:`~.codec.to_stored`, :func:`~.codec.from_stored`).
    renames: tuple[tuple[str, str], ...] = ()
    #: Field selectors whose value is not at the field's own dotted path: ``(selector, path)``.
    field_paths: tuple[tuple[str, str], ...] = ()
    #: For a custom resource (a version of a CustomResourceDefinition): its schema and subresources, which
    #: decoding, validation, defaults, pruning, the table form and OpenAPI follow instead of a built-in spec.
    custom: CustomSchema | None = None
    #: For a built-in type whose field spec is derived from the official client's model (:mod:`.models`): the
    #: model class name (``V1Deployment``); ``""`` for the types with a hand-written spec (:mod:`.schemas`).
    model: str = ""
    #: A built-in type with a ``/status`` subresource: the main endpoint ignores ``status``, ``/status`` ignores
    #: everything else, and ``metadata.generation`` counts changes of ``spec`` (see :mod:`.strategy`).
    status: bool = False
    #: A built-in type with a ``/scale`` subresource (``autoscaling/v1`` Scale of ``spec.replicas``).
    scale: bool = False
    #: The categories discovery lists (``all`` for the kinds ``kubectl get all`` shows).
    categories: tuple[str, ...] = ()

    @property
    def storage_name(self) -> str:
        """The resource's part of its storage keys: ``configmaps``; ``<group>/<plural>`` for a custom resource
        (as kube-apiserver lays out CRs: ``/registry/<group>/<plural>/<namespace>/<name>``)."""
        return f"{self.group}/{self.name}" if self.custom is not None else self.name

    @property
    def discovery_verbs(self) -> list[str]:
        """The verbs as discovery lists them (sorted, ``deletecollection`` included where served)."""
        verbs = set(self.verbs)
        if self.namespaced and "delete" in verbs:
            verbs.add("deletecollection")
        return sorted(verbs)

    @property
    def list_kind(self) -> str:
        return self.kind + "List"

    @property
    def api_version(self) -> str:
        """The ``apiVersion`` of the objects: ``v1`` or ``<group>/<version>``."""
        return f"{self.group}/{self.version}" if self.group else self.version

    @property
    def qualified_name(self) -> str:
        """The resource as error messages name it: ``configmaps``, ``leases.coordination.k8s.io``."""
        return f"{self.name}.{self.group}" if self.group else self.name

    @property
    def path_prefix(self) -> str:
        """The URL prefix of the resource's group version: ``/api/v1`` or ``/apis/<group>/<version>``."""
        return f"/apis/{self.group}/{self.version}" if self.group else f"/api/{self.version}"


_NAME_NAMESPACE: Final = frozenset({"metadata.name", "metadata.namespace"})
CONFIGMAPS: Final = ResourceType("configmaps", "configmap", "ConfigMap", True, ("cm",), _NAME_NAMESPACE)
NAMESPACES: Final = ResourceType(
    "namespaces", "namespace", "Namespace", False, ("ns",), frozenset({"metadata.name", "status.phase"})
)
LEASES: Final = ResourceType("leases", "lease", "Lease", True, (), _NAME_NAMESPACE, "coordination.k8s.io")
SELF_SUBJECT_ACCESS_REVIEWS: Final = ResourceType(
    "selfsubjectaccessreviews", "selfsubjectaccessreview", "SelfSubjectAccessReview", False, (), frozenset(),
    "authorization.k8s.io", verbs=("create",))
SELF_SUBJECT_RULES_REVIEWS: Final = ResourceType(
    "selfsubjectrulesreviews", "selfsubjectrulesreview", "SelfSubjectRulesReview", False, (), frozenset(),
    "authorization.k8s.io", verbs=("create",))
SELF_SUBJECT_REVIEWS: Final = ResourceType(
    "selfsubjectreviews", "selfsubjectreview", "SelfSubjectReview", False, (), frozenset(),
    "authentication.k8s.io", verbs=("create",))
_EVENT_RENAMES: Final = (
    ("involvedObject", "regarding"), ("message", "note"), ("source", "deprecatedSource"),
    ("firstTimestamp", "deprecatedFirstTimestamp"), ("lastTimestamp", "deprecatedLastTimestamp"),
    ("count", "deprecatedCount"), ("reportingComponent", "reportingController"),
)
_REFERENCE_FIELDS: Final = ("kind", "namespace", "name", "uid", "apiVersion", "resourceVersion", "fieldPath")
EVENTS: Final = ResourceType(
    "events", "event", "Event", True, ("ev",),
    _NAME_NAMESPACE | {f"involvedObject.{f}" for f in _REFERENCE_FIELDS}
    | {"reason", "reportingComponent", "source", "type"},
    field_paths=(("source", "source.component"),),
)
#: ``events.k8s.io/v1`` Events: the same objects as core ``v1`` Events (one storage), with renamed fields.
EVENTS_V1: Final = ResourceType(
    "events", "event", "Event", True, (),
    _NAME_NAMESPACE | {f"regarding.{f}" for f in _REFERENCE_FIELDS} | {"reason", "reportingController", "type"},
    "events.k8s.io", renames=_EVENT_RENAMES,
)
CRDS: Final = ResourceType(
    "customresourcedefinitions", "customresourcedefinition", "CustomResourceDefinition", False, ("crd", "crds"),
    frozenset({"metadata.name"}), "apiextensions.k8s.io")

def _kind(name: str, kind: str, short: tuple[str, ...] = (), group: str = "", *, namespaced: bool = True,
          status: bool = False, scale: bool = False, all_category: bool = False,
          selectors: frozenset[str] = _NAME_NAMESPACE, prefix: str = "V1") -> ResourceType:
    """A built-in type whose spec comes from the client model ``<prefix><kind>`` (:mod:`.models`)."""
    return ResourceType(name, kind.lower(), kind, namespaced, short,
                        selectors if namespaced else selectors - {"metadata.namespace"}, group, model=prefix + kind,
                        status=status, scale=scale, categories=("all",) if all_category else ())


PODS: Final = _kind("pods", "Pod", ("po",), status=True, all_category=True, selectors=_NAME_NAMESPACE | {
    "spec.nodeName", "spec.restartPolicy", "spec.schedulerName", "spec.serviceAccountName", "spec.hostNetwork",
    "status.phase", "status.podIP", "status.nominatedNodeName"})
SERVICES: Final = _kind("services", "Service", ("svc",), status=True, all_category=True)
SECRETS: Final = _kind("secrets", "Secret", selectors=_NAME_NAMESPACE | {"type"})
SERVICE_ACCOUNTS: Final = _kind("serviceaccounts", "ServiceAccount", ("sa",))
ENDPOINTS: Final = ResourceType("endpoints", "endpoints", "Endpoints", True, ("ep",), _NAME_NAMESPACE,
                                model="V1Endpoints")
PVCS: Final = _kind("persistentvolumeclaims", "PersistentVolumeClaim", ("pvc",), status=True)
_APPS: Final = "apps"
DEPLOYMENTS: Final = _kind("deployments", "Deployment", ("deploy",), _APPS, status=True, scale=True,
                           all_category=True)
STATEFULSETS: Final = _kind("statefulsets", "StatefulSet", ("sts",), _APPS, status=True, scale=True,
                            all_category=True)
DAEMONSETS: Final = _kind("daemonsets", "DaemonSet", ("ds",), _APPS, status=True, all_category=True)
REPLICASETS: Final = _kind("replicasets", "ReplicaSet", ("rs",), _APPS, status=True, scale=True, all_category=True)
JOBS: Final = _kind("jobs", "Job", (), "batch", status=True, all_category=True)
CRONJOBS: Final = _kind("cronjobs", "CronJob", ("cj",), "batch", status=True, all_category=True)
INGRESSES: Final = _kind("ingresses", "Ingress", ("ing",), "networking.k8s.io", status=True)
PDBS: Final = _kind("poddisruptionbudgets", "PodDisruptionBudget", ("pdb",), "policy", status=True)
_RBAC: Final = "rbac.authorization.k8s.io"
ROLES: Final = _kind("roles", "Role", (), _RBAC)
ROLE_BINDINGS: Final = _kind("rolebindings", "RoleBinding", (), _RBAC)
CLUSTER_ROLES: Final = _kind("clusterroles", "ClusterRole", (), _RBAC, namespaced=False)
CLUSTER_ROLE_BINDINGS: Final = _kind("clusterrolebindings", "ClusterRoleBinding", (), _RBAC, namespaced=False)
ENDPOINT_SLICES: Final = _kind("endpointslices", "EndpointSlice", (), "discovery.k8s.io")
_ADMISSION: Final = "admissionregistration.k8s.io"
VALIDATING_ADMISSION_POLICIES: Final = _kind("validatingadmissionpolicies", "ValidatingAdmissionPolicy", (), _ADMISSION,
                                             namespaced=False, status=True)
VALIDATING_ADMISSION_POLICY_BINDINGS: Final = _kind("validatingadmissionpolicybindings",
                                                    "ValidatingAdmissionPolicyBinding", (), _ADMISSION,
                                                    namespaced=False)
#: The CEL admission policies (:mod:`~keyqueue.apiserver.admission.policy` evaluates them on every write).
ADMISSION_POLICY_KINDS: Final = (VALIDATING_ADMISSION_POLICIES, VALIDATING_ADMISSION_POLICY_BINDINGS)
#: The built-in kinds operators create and watch, whose specs come from the official client's models.
WORKLOAD_KINDS: Final = (
    PODS, SERVICES, SECRETS, SERVICE_ACCOUNTS, ENDPOINTS, PVCS, DEPLOYMENTS, STATEFULSETS, DAEMONSETS, REPLICASETS,
    JOBS, CRONJOBS, INGRESSES, PDBS, ROLES, ROLE_BINDINGS, CLUSTER_ROLES, CLUSTER_ROLE_BINDINGS, ENDPOINT_SLICES,
)
VALIDATING_WEBHOOK_CONFIGURATIONS: Final = _kind(
    "validatingwebhookconfigurations", "ValidatingWebhookConfiguration", (), _ADMISSION, namespaced=False)
MUTATING_WEBHOOK_CONFIGURATIONS: Final = _kind(
    "mutatingwebhookconfigurations", "MutatingWebhookConfiguration", (), _ADMISSION, namespaced=False)
#: The admission webhook configurations (:mod:`keyqueue.apiserver.admission` calls the webhooks they name).
WEBHOOK_CONFIGURATIONS: Final = (VALIDATING_WEBHOOK_CONFIGURATIONS, MUTATING_WEBHOOK_CONFIGURATIONS)
#: Types whose delete answers with the deleted object rather than a ``Status`` (as kube's registries of these
#: kinds set ``ReturnDeletedObject``, and the official client expects: ``delete_namespaced_pod`` returns a V1Pod).
RETURNS_DELETED: Final = frozenset({PODS, SERVICES, SERVICE_ACCOUNTS, PVCS})
#: Types whose create is answered (computed from the request) and never stored.
REVIEWS: Final = (SELF_SUBJECT_ACCESS_REVIEWS, SELF_SUBJECT_RULES_REVIEWS, SELF_SUBJECT_REVIEWS)
#: The built-in resource types, in discovery order.  What one server serves is its
#: :class:`~keyqueue.apiserver.catalogue.Catalogue`: these, plus the custom resources of the CRDs stored in it.
BUILTINS: Final = (CONFIGMAPS, NAMESPACES, EVENTS, LEASES, EVENTS_V1, CRDS, *REVIEWS, *WORKLOAD_KINDS,
                   *ADMISSION_POLICY_KINDS, *WEBHOOK_CONFIGURATIONS)


def stored_type(rt: ResourceType) -> ResourceType:
    """The type whose shape ``rt``'s objects are stored in: ``rt`` itself unless it has
    :attr:`ResourceType.renames` (then the unrenamed type of the same resource name)."""
    if not rt.renames:
        return rt
    return next(t for t in BUILTINS if t.name == rt.name and t.group != rt.group and not t.renames)


def field_value(rt: ResourceType, obj: Mapping[str, Any], selector: str) -> str:
    """The value a field selector ``selector`` (one of ``rt.field_selectors``) compares: the string at its
    dotted path (or the path :attr:`ResourceType.field_paths` names), ``""`` if unset."""
    path = dict(rt.field_paths).get(selector, selector)
    value: Any = obj
    for part in path.split("."):
        if not isinstance(value, Mapping):
            return ""
        value = value.get(part)
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    return str(value)
