"""Testing the asyncio Widget operator (examples/widget_operator_aio.py) with keyqueue's pytest plugin (run:
`.venv/bin/python -m pytest examples/test_widget_operator_aio.py`).

The operator runs on an event loop in a thread of its own, so the tests stay plain functions: they are the tests
of examples/test_widget_operator.py, imported here, where `operator` is this module's fixture.
"""

import asyncio
import threading
from collections.abc import Iterator

import pytest
from kubernetes import client
from test_widget_operator import (  # noqa: F401  (collected here, with this module's `operator`)
    crd,
    test_a_widget_gets_its_config_map_deployment_finalizer_and_condition,
    test_deletion_runs_the_cleanup_and_collects_the_owned_objects,
    test_owned_objects_are_repaired_and_follow_the_spec,
)
from widget_operator_aio import WidgetOperator


@pytest.fixture
def operator(crd: None, kube_api_client: client.ApiClient,  # noqa: F811  (`crd`: the imported fixture)
             kube_namespace: str) -> Iterator[WidgetOperator]:
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    op = WidgetOperator(kube_api_client, kube_namespace)
    try:
        asyncio.run_coroutine_threadsafe(op.__aenter__(), loop).result(60)
        yield op
        asyncio.run_coroutine_threadsafe(op.__aexit__(), loop).result(60)
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(30)
        loop.close()
