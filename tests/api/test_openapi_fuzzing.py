"""Schemathesis at length (marked slow): every coverage case it derives from /openapi.json,
then hundreds of generated requests per operation that takes a body.

test_openapi_conformance.py is the quick pass. This one adds what it leaves out: the coverage
cases (each member missing, null, of a wrong type, at and past each limit), valid bodies whose
optional members are null, and requests aimed at things that exist (a schedule, a report, an
export, a link) as well as at ids that do not. Every failure is collected and reported.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from typing import Any

import pytest
import schemathesis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from hypothesis.errors import Unsatisfiable
from schemathesis import GenerationMode
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_schema_conformance,
    status_code_conformance,
)

from tests.api.conftest import Api

pytestmark = pytest.mark.slow

CALLER = "admin@acme.test"
ORDERS = "q-orders-acme"  # the id conftest's add_query() gives the "orders" query
# Examples per operation and generation mode: many where a body gives room to vary, few
# where only an id in the path does (those mostly meet a 404).
EXAMPLES_WITH_BODY = 250
EXAMPLES_WITHOUT = 20
CHECKS = [
    not_a_server_error,
    status_code_conformance,
    content_type_conformance,
    response_schema_conformance,
]


def _inline(spec: dict[str, Any], node: Any) -> Any:
    """`node` with every `$ref` replaced by a copy of what it names (the schemas have no
    cycles)."""
    if isinstance(node, dict):
        if "$ref" in node:
            found: Any = spec
            for part in node["$ref"].removeprefix("#/").split("/"):
                found = found[part]
            return _inline(spec, found)
        return {key: _inline(spec, value) for key, value in node.items()}
    if isinstance(node, list):
        return [_inline(spec, value) for value in node]
    return node


def _optional_members_nullable(schema: Any) -> None:
    """Let every optional member of every object in `schema` be null too, in place."""
    if isinstance(schema, dict):
        for value in schema.values():
            _optional_members_nullable(value)
        required = set(schema.get("required", ()))
        members = schema.get("properties", {}) if schema.get("type") == "object" else {}
        for name, member in members.items():
            if name not in required:
                members[name] = {"anyOf": [member, {"type": "null"}]}
    elif isinstance(schema, list):
        for value in schema:
            _optional_members_nullable(value)


def _with_null_members(spec: dict[str, Any]) -> dict[str, Any]:
    """`spec` whose request bodies allow null for each optional member (responses as they
    are, so their checks keep their strength)."""
    spec = copy.deepcopy(spec)
    for operations in spec["paths"].values():
        for operation in operations.values():
            for media in operation.get("requestBody", {}).get("content", {}).values():
                media["schema"] = _inline(spec, media["schema"])
                _optional_members_nullable(media["schema"])
    return spec


@pytest.fixture
def fuzz_world(api: Api) -> tuple[Api, dict[str, str]]:
    """A caller, a query, a report, a schedule, a succeeded export with a delivery and a link
    to it, a request awaiting approval, in a workspace; and the path parameters that name
    them."""
    api.member(CALLER, "admin")
    api.add_query("orders")
    export = api.post(
        "/api/v1/exports",
        CALLER,
        json={"query_id": ORDERS, "format": "csv", "notify": [{"email": CALLER}]},
    )
    report = api.post(
        "/api/v1/reports",
        CALLER,
        json={"title": "weekly", "sections": [{"heading": "Orders", "query_id": ORDERS}]},
    )
    schedule = api.post(
        "/api/v1/schedules",
        CALLER,
        json={"query_id": ORDERS, "format": "csv", "cron": "0 8 * * 1"},
    )
    api.add_query("salaries")
    api.client.patch(
        "/api/v1/workspaces/acme/policy",
        headers=api.headers(CALLER),
        json={"sensitive_queries": ["q-salaries-acme"]},
    )
    approval = api.post(
        "/api/v1/exports", CALLER, json={"query_id": "q-salaries-acme", "format": "csv"}
    )
    api.drain()
    link = api.post(f"/api/v1/exports/{export.json()['id']}/links", CALLER)
    assert [r.status_code for r in (export, report, schedule, link)] == [202, 201, 201, 201]
    (delivery,) = api.context.deliveries.list_deliveries(export.json()["id"])
    return api, {
        "query_id": ORDERS,
        "report_id": report.json()["id"],
        "schedule_id": schedule.json()["id"],
        "export_id": export.json()["id"],
        "link_id": link.json()["id"],
        "delivery_id": delivery.id,
        "approval_id": approval.json()["id"],
        "token": link.json()["url"].rsplit("/", 1)[-1],
        "workspace_id": "acme",
    }


def _operations(spec: dict[str, Any], app: Any) -> Iterator[Any]:
    schema = schemathesis.openapi.from_dict(spec)
    schema.app = app
    for result in schema.get_all_operations():
        yield result.ok()


def _described(exc: BaseException) -> str:
    """An error's message; each one's, for the several distinct failures Hypothesis found."""
    if isinstance(exc, BaseExceptionGroup):
        return "; ".join(_described(each) for each in exc.exceptions)
    return str(exc)


def _call(case: Any, headers: dict[str, str], failures: list[str]) -> None:
    try:
        case.call_and_validate(headers=headers, checks=CHECKS)
    except Exception as exc:  # every failure is reported, not just the first
        failures.append(
            f"{case.operation.label} {case.path_parameters} {case.body!r:.300}: {_described(exc)}"
        )


def test_every_coverage_case_conforms(fuzz_world: tuple[Api, dict[str, str]]) -> None:
    """Schemathesis's coverage cases for every operation (each member missing, null, of a
    wrong type, at and past its limits), at unknown ids and at real ones: never a 5xx, and
    always a response the schema documents."""
    api, existing = fuzz_world
    headers = api.headers(CALLER)
    schema = schemathesis.openapi.from_asgi("/openapi.json", api.client.app)
    failures: list[str] = []
    cases = 0
    for result in schema.get_all_operations():
        operation = result.ok()
        for case in schema.iter_coverage_cases(
            operation,
            generation_modes=list(GenerationMode),
            generation_config=schema.config.generation,
        ):
            cases += 1
            _call(case, headers, failures)
            if case.body is not None and case.path_parameters:
                case.path_parameters = {name: existing[name] for name in case.path_parameters}
                _call(case, headers, failures)
    assert failures == []
    assert cases >= 1000


def _fuzz(strategy: st.SearchStrategy[Any], examples: int, check: Callable[[Any], None]) -> None:
    """Run `check` on up to `examples` cases drawn from `strategy` (shrinking a failure)."""

    @given(case=strategy)
    @settings(
        max_examples=examples,
        deadline=None,
        database=None,
        suppress_health_check=list(HealthCheck),
    )
    def conforms(case: Any) -> None:
        check(case)

    conforms()


@pytest.mark.parametrize("mode", [GenerationMode.POSITIVE, GenerationMode.NEGATIVE])
def test_many_generated_requests_conform(
    fuzz_world: tuple[Api, dict[str, str]], mode: GenerationMode
) -> None:
    """Hundreds of generated requests per operation with a body (valid ones with null for
    optional members, and invalid ones), at unknown ids and at real ones: never a 5xx, and
    always a response the schema documents."""
    api, existing = fuzz_world
    headers = api.headers(CALLER)
    spec = api.client.get("/openapi.json").json()
    if mode is GenerationMode.POSITIVE:
        spec = _with_null_members(spec)
    failures: list[str] = []
    fuzzed = 0

    def conforms(case: Any) -> None:
        case.call_and_validate(headers=headers, checks=CHECKS)

    for operation in _operations(spec, api.client.app):
        real = {p.name: existing[p.name] for p in operation.path_parameters}
        strategies = [operation.as_strategy(mode)]
        if real and (mode is GenerationMode.POSITIVE or operation.body):
            strategies.append(operation.as_strategy(mode, path_parameters=real))
        examples = EXAMPLES_WITH_BODY if operation.body else EXAMPLES_WITHOUT
        try:
            _fuzz(st.one_of(strategies), examples, conforms)
        except Unsatisfiable:
            # An operation without inputs (GET /metrics) has no invalid request to generate.
            assert mode is GenerationMode.NEGATIVE, operation.label
            continue
        except Exception as exc:  # every operation's failure is reported
            failures.append(f"{operation.label}: {_described(exc)}")
        fuzzed += 1
    assert failures == []
    assert fuzzed >= 10
