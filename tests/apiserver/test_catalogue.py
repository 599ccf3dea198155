"""The resource catalogue is per server: what one serves (its CRDs' resources) never shows in another."""

from __future__ import annotations

import dataclasses

from keyqueue.apiserver import MemoryBackend, Registry
from keyqueue.apiserver.catalogue import Catalogue
from keyqueue.apiserver.custom import CustomSchema
from keyqueue.apiserver.objects import CONFIGMAPS, ResourceType


def _widgets(version: str = "v1") -> ResourceType:
    schema = CustomSchema("widgets.example.com", "v1", {"type": "object"})
    return dataclasses.replace(CONFIGMAPS, name="widgets", singular="widget", kind="Widget", short_names=(),
                               group="example.com", version=version, custom=schema)


def test_two_registries_have_their_own_catalogue() -> None:
    a, b = Registry(MemoryBackend()), Registry(MemoryBackend())
    assert a.catalogue is not b.catalogue
    a.catalogue.set_custom("widgets.example.com", [_widgets()])
    assert a.catalogue.resource_for("example.com/v1", "widgets") is not None
    assert b.catalogue.resource_for("example.com/v1", "widgets") is None
    assert "example.com" in [g["name"] for g in a.catalogue.api_group_list()["groups"]]
    assert "example.com" not in [g["name"] for g in b.catalogue.api_group_list()["groups"]]


def test_documents_follow_changes() -> None:
    cat = Catalogue()
    before = cat.openapi_v3_root()["paths"]
    assert "apis/example.com/v1" not in before
    cat.set_custom("widgets.example.com", [_widgets()])
    after = cat.openapi_v3_root()["paths"]
    assert "apis/example.com/v1" in after
    assert cat.openapi_v3_bytes("apis/example.com/v1") is not None
    assert cat.api_resource_list("example.com/v1") is not None
    assert cat.api_group("example.com") is not None
    assert [rt.name for rt in cat.namespaced()].count("widgets") == 1
    assert cat.remove_custom("widgets.example.com")
    assert "apis/example.com/v1" not in cat.openapi_v3_root()["paths"]
    assert cat.resource_for("example.com/v1", "widgets") is None
    assert cat.api_group("example.com") is None
    # The built-in documents are the same as before the CRD came and went.
    assert cat.openapi_v3_root()["paths"] == before


def test_changes_apply_in_revision_order() -> None:
    """Two writers of one CRD may report in either order: an older state never replaces a newer one, and a CRD
    deleted at revision R is not served again by a state older than R."""
    cat = Catalogue()
    new, old = _widgets("v2"), _widgets("v1")
    assert cat.set_custom("widgets.example.com", [new], revision=5)
    assert not cat.set_custom("widgets.example.com", [old], revision=3)
    assert cat.custom("widgets.example.com") == (new,)
    assert cat.remove_custom("widgets.example.com", revision=7) == (new,)
    assert not cat.set_custom("widgets.example.com", [old], revision=6)
    assert cat.resource_for("example.com/v1", "widgets") is None
    assert cat.set_custom("widgets.example.com", [old], revision=8)  # created again
    assert cat.resource_for("example.com/v1", "widgets") is old
