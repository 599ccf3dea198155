"""Custom resources: the behaviour a CustomResourceDefinition's version gives its objects (placeholder)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

__all__ = ["CustomSchema"]


@dataclass(frozen=True, eq=False)
class CustomSchema:
    """One served version of a CRD."""

    crd_name: str
    storage_version: str
    schema: Mapping[str, Any]
    status: bool = False
    categories: tuple[str, ...] = ()

    def openapi_schema(self, object_meta: dict[str, Any]) -> dict[str, Any]:
        return dict(self.schema)
