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


_SECRET = "hunter2-" + "in-a-local"  # built, so no traceback line shows it


def _crash_holding(secret: str) -> None:
    credentials = f"postgresql://reader:{secret}@db/dw"
    raise RuntimeError(f"could not use the source ({len(credentials)} characters)")


@pytest.mark.parametrize("as_json", [True, False])
def test_a_traceback_logs_no_local_variables(
    monkeypatch: pytest.MonkeyPatch, as_json: bool
) -> None:
    """A logged traceback, as JSON or on a terminal, names the error and where it happened
    but never a frame's local variables: a password held in one stays out of the log."""
    stream = io.StringIO()
    monkeypatch.setattr("sys.stderr", stream)
    configure_logging(json=as_json)
    try:
        _crash_holding(_SECRET)
    except RuntimeError:
        structlog.get_logger().exception("api.unexpected_error")
    finally:
        structlog.reset_defaults()
    logged = stream.getvalue()
    assert "RuntimeError: could not use the source" in logged
    assert "_crash_holding" in logged
    assert _SECRET not in logged
