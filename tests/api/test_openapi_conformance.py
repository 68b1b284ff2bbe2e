"""Schemathesis against /openapi.json: generated requests, valid and not, to every operation.

No answer is a 5xx, and every answer (status, content type, body) is one the schema
describes. Examples are bounded per operation and generation mode to keep the suite fast;
test_openapi_fuzzing.py is the long run.
"""

from __future__ import annotations

from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import Api

CALLER = "admin@acme.test"
EXAMPLES = 25
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _operations(api: Api) -> list[Any]:
    schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
    return [result.ok() for result in schema.get_all_operations()]


@pytest.fixture
def populated(api: Api) -> Api:
    """A caller, a query and a succeeded export for generated requests to find."""
    api.member(CALLER, "admin")
    query = api.add_query("orders")
    response = api.post("/api/v1/exports", CALLER, json={"query_id": query.id, "format": "csv"})
    assert response.status_code == 202
    api.drain()
    return api


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_every_operation_conforms_to_its_schema(populated: Api, mode: GenerationMode) -> None:
    """Whatever the input, on every operation: never a 5xx, and the response (status, content
    type, body) is one the schema documents."""
    headers = populated.headers(CALLER)
    operations = _operations(populated)
    assert len(operations) >= 10
    exercised = 0
    for operation in operations:

        @given(case=operation.as_strategy(mode))
        @settings(
            max_examples=EXAMPLES,
            deadline=None,
            database=None,
            suppress_health_check=list(HealthCheck),
        )
        def conforms(case: Any) -> None:
            case.call_and_validate(headers=headers, checks=CHECKS)

        try:
            conforms()
        except Unsatisfiable:
            # An operation without inputs (GET /metrics) has no invalid request to generate.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        except Exception as exc:
            raise AssertionError(f"{operation.label}: {exc}") from exc
        exercised += 1
    assert exercised >= 10
