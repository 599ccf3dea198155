"""The self reviews (``kubectl auth whoami``, ``kubectl auth can-i``): answered from the request, never stored."""

from __future__ import annotations

from typing import Any

from aiohttp import web

from .. import errors
from ..objects import SELF_SUBJECT_REVIEWS, SELF_SUBJECT_RULES_REVIEWS, ResourceType
from ..registry import WriteOptions
from .base import ServerBase
from .request import _Request

__all__ = ["Reviews"]


class Reviews(ServerBase):
    """The answer to a create of a review type (:data:`~keyqueue.apiserver.objects.REVIEWS`)."""

    def _user_info(self, http: web.BaseRequest) -> dict[str, Any]:
        """Who the request is from: :attr:`user` when it carried the server's token, else ``system:anonymous``
        (a server without a token takes every request as anonymous, and allows it)."""
        if self._token_bytes is not None and http.headers.get("Authorization", "").startswith("Bearer "):
            return {"username": self.user, "groups": ["system:masters", "system:authenticated"]}
        return {"username": "system:anonymous", "groups": ["system:unauthenticated"]}

    def _review(self, req: _Request, rt: ResourceType, body: Any, opts: WriteOptions) -> dict[str, Any]:
        """Answer a SelfSubjectAccessReview (every request is allowed: no authorization), a SelfSubjectRulesReview
        (every verb on everything) or a SelfSubjectReview (the requester's user info).  Nothing is stored; 422 for
        an access review that names neither or both of ``resourceAttributes`` and ``nonResourceAttributes``, and
        for a rules review without ``spec.namespace``."""
        obj = self.registry.decode_body(rt, body, opts)
        meta = obj["metadata"]
        meta.pop("namespace", None)
        meta["creationTimestamp"] = None
        if rt is SELF_SUBJECT_REVIEWS:
            obj["status"] = {"userInfo": self._user_info(req.http)}
            return obj
        if rt is SELF_SUBJECT_RULES_REVIEWS:
            if not (obj.get("spec") or {}).get("namespace"):
                raise errors.invalid(rt.kind, rt.qualified_name, "", [
                    ("FieldValueRequired", "spec.namespace", "Required value")])
            obj["status"] = {
                "resourceRules": [{"verbs": ["*"], "apiGroups": ["*"], "resources": ["*"]}],
                "nonResourceRules": [{"verbs": ["*"], "nonResourceURLs": ["*"]}],
                "incomplete": False,
            }
            return obj
        spec = obj.get("spec") or {}
        if "resourceAttributes" in spec and "nonResourceAttributes" in spec:
            raise errors.invalid(rt.kind, rt.qualified_name, "", [(
                "FieldValueInvalid", "spec.nonResourceAttributes",
                "Invalid value: cannot be specified in combination with resourceAttributes")])
        if "resourceAttributes" not in spec and "nonResourceAttributes" not in spec:
            raise errors.invalid(rt.kind, rt.qualified_name, "", [(
                "FieldValueRequired", "spec.resourceAttributes",
                "Required value: exactly one of nonResourceAttributes or resourceAttributes must be specified")])
        obj["spec"] = spec
        obj["status"] = {"allowed": True, "reason": "keyqueue's test API server allows every request"}
        return obj
