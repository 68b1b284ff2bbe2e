"""The local command line's downloads and links, on the in-memory fakes: each leaves its
audit event before anything is handed over, and none is handed over unrecorded."""

from __future__ import annotations

import pytest

from qexport.container import Container
from qexport.domain.audit import ActorKind, AuditEvent, AuditFilter, operator_for
from qexport.domain.exports import ExportRecord
from qexport.domain.failures import MetadataUnavailableError
from qexport.services.exports import downloadable, hand_over_file, hand_over_link
from tests.fakes import InMemoryAuditLog, InMemoryObjectStore
from tests.unit.fakes import FakeSource
from tests.unit.test_worker import ALICE, make_deps, request, work


class _Unrecordable(InMemoryAuditLog):
    """An audit log whose database does not answer."""

    def record(self, event: AuditEvent) -> bool:
        return False


class _Signing(InMemoryObjectStore):
    """An object store that signs URLs, as S3 does."""

    presign_seconds = 300

    def presigned_url(self, key: str, filename: str, *, max_seconds: float | None = None) -> str:
        return f"https://bucket.test/{key}?expires={max_seconds}"


def _succeeded() -> tuple[ExportRecord, Container]:
    deps = make_deps(FakeSource())
    record = request(deps)
    assert work(deps)
    return downloadable(deps.exports, deps.catalog, deps.clock, ALICE, record.id), deps


def test_a_local_download_is_recorded_before_its_first_byte() -> None:
    """The event (the operator for the requester, the export, its whole size) is in the
    trail when the file is handed over."""
    record, deps = _succeeded()
    stream = hand_over_file(deps.objects, deps.audit, deps.clock, operator_for("alice"), record)
    (happened,) = deps.audit.list_events(
        workspace_id="w1", narrow=AuditFilter(action="file.downloaded")
    )
    assert (happened.actor_kind, happened.actor_id) == (ActorKind.OPERATOR, "alice")
    assert (happened.target_kind, happened.target_id) == ("export", record.id)
    assert f'"bytes":{record.size_bytes}' in happened.details
    assert len(stream.read()) == record.size_bytes


def test_a_download_that_cannot_be_recorded_hands_nothing_over() -> None:
    """With the audit trail's database down, the download (and a link) is refused saying
    why, rather than leaving unaccounted."""
    record, deps = _succeeded()
    actor, down = operator_for("alice"), _Unrecordable()
    with pytest.raises(MetadataUnavailableError, match="could not be recorded"):
        hand_over_file(deps.objects, down, deps.clock, actor, record)
    with pytest.raises(MetadataUnavailableError, match="could not be recorded"):
        hand_over_link(_Signing(), down, deps.clock, actor, record)


def test_a_local_link_is_recorded_and_never_outlives_the_export() -> None:
    """`--url`: a presigned URL valid at most the store's limit, recorded as file.presigned
    with how long it is valid."""
    record, deps = _succeeded()
    link, valid = hand_over_link(_Signing(), deps.audit, deps.clock, operator_for("alice"), record)
    assert valid == 300
    assert link.endswith("?expires=300")
    (happened,) = deps.audit.list_events(workspace_id="w1", narrow=AuditFilter(action="file."))
    assert happened.action == "file.presigned"
    assert '"valid_seconds":300' in happened.details
