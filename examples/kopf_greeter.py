"""A kopf operator (run by examples/test_kopf_operator.py under keyqueue's pytest plugin): every Greeting gets
`status.message`, written by kopf from the handler's return value."""

from typing import Any

import kopf


@kopf.on.create("kopf.example.com", "v1", "greetings")
def greet(spec: Any, **_: Any) -> dict[str, str]:
    return {"message": f"Hello, {spec['name']}!"}  # kopf stores it in status.greet
