"""Worker logs as JSON lines: what an operator reads when an export fails `internal`."""

from __future__ import annotations

import io
import json
from collections.abc import Iterator

import pytest
import structlog

from qexport.domain.failures import FailureCode
from qexport.logs import configure_logging
from tests.unit.fakes import FakeSource
from tests.unit.test_worker import current, make_deps, request, work


@pytest.fixture
def json_logs(monkeypatch: pytest.MonkeyPatch) -> Iterator[io.StringIO]:
    """JSON logs written to a buffer (what the worker writes to stderr), for one test."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging(json=True)  # the logger writes to the stderr it finds now
    yield stream
    structlog.reset_defaults()


def test_an_internal_failure_logs_its_traceback_in_json(json_logs: io.StringIO) -> None:
    """An export failing `internal` leaves one attempt_crashed JSON line whose "exception"
    holds the traceback and the error (not `"exc_info": true`); the record's detail does not."""
    deps = make_deps(FakeSource(error=ZeroDivisionError("division by zero"), fail_at_batch=2))
    record = request(deps)
    work(deps)
    assert current(deps, record).failure_code is FailureCode.INTERNAL
    lines = [json.loads(line) for line in json_logs.getvalue().splitlines() if line]
    crashed = [line for line in lines if line["event"] == "attempt_crashed"]
    assert len(crashed) == 1
    assert "exc_info" not in crashed[0]
    assert crashed[0]["exception"].startswith("Traceback (most recent call last):")
    assert "ZeroDivisionError: division by zero" in crashed[0]["exception"]
    assert crashed[0]["export_id"] == record.id
