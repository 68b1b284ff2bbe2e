"""/metrics' download figures by workspace, from what the audit trail recorded: downloads,
bytes sent and public-link uses, on SQLite and PostgreSQL, on a folder and on S3; what a
prune takes off; the events a process could not record."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import pytest
from prometheus_client.parser import text_string_to_metric_families

from qexport.services import audit_trail
from qexport.store.audit import log as audit_log
from tests.api.conftest import Api, api_on

pytest_plugins = ["tests.support.s3server"]

ALICE = "alice@acme.test"
BOB = "bob@other.test"
FIGURES = ("qexport_downloads_total", "qexport_downloaded_bytes_total")
PUBLIC = "qexport_public_link_uses_total"


def _scrape(api: Api) -> dict[str, dict[str, float]]:
    """Each download figure's samples: metric name -> workspace -> value."""
    response = api.client.get("/metrics")
    assert response.status_code == 200
    found: dict[str, dict[str, float]] = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            if sample.name in (*FIGURES, PUBLIC):
                found.setdefault(sample.name, {})[sample.labels["workspace"]] = sample.value
    return found


def _scalar(api: Api, name: str) -> float:
    for family in text_string_to_metric_families(api.client.get("/metrics").text):
        for sample in family.samples:
            if sample.name == name:
                return sample.value
    raise AssertionError(f"{name} is not reported")


def _done_export(api: Api, who: str, query: str) -> tuple[str, int]:
    """A succeeded export of `query` requested by `who`: its id and its file's size."""
    response = api.post("/api/v1/exports", who, json={"query_id": query, "format": "csv"})
    assert response.status_code == 202, response.text
    export_id = str(response.json()["id"])
    assert api.drain() == {"succeeded": 1}
    size = api.get(f"/api/v1/exports/{export_id}", who).json()["size_bytes"]
    assert size > 10
    return export_id, int(size)


def _file(api: Api, export_id: str, who: str, **headers: str) -> Any:
    return api.client.get(
        f"/api/v1/exports/{export_id}/file",
        headers={**api.headers(who), **headers},
        follow_redirects=False,
    )


def _two_workspaces(api: Api) -> tuple[tuple[str, int], tuple[str, int]]:
    """Alice's export in acme and Bob's in other, each succeeded."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer", workspace="other")
    api.add_query("orders")
    api.add_query("orders", workspace="other")
    return _done_export(api, ALICE, "q-orders-acme"), _done_export(api, BOB, "q-orders-other")


@pytest.fixture(params=["sqlite", "postgresql"])
def api_on_s3(
    request: pytest.FixtureRequest,
    tmp_path: Path,
    source_template: Path,
    moto_endpoint: str,
    s3_bucket: str,
) -> Iterator[Api]:
    """The API with its files in an S3 bucket (moto), its metadata on each database."""
    url = request.getfixturevalue("pg_url") if request.param == "postgresql" else ""
    storage = {"storage_url": f"s3://{s3_bucket}/tenant", "s3_endpoint_url": moto_endpoint}
    with api_on(tmp_path, source_template, url, **storage) as api:
        yield api


def test_a_scrape_counts_each_workspaces_downloads_bytes_and_link_uses(api_both: Api) -> None:
    """Whole files (200) and ranges (206) count with the bytes sent, a public link's download
    counts as a use too; a 304, a 416 and a revoked link's 410 count for nothing; each
    workspace's figures are its own, and a workspace without downloads reports 0."""
    api = api_both
    (acme_id, acme_size), (other_id, other_size) = _two_workspaces(api)
    api.context.accounts.ensure_workspace("quiet", now=api.clock.now())
    before = _scrape(api)
    assert before["qexport_downloads_total"] == {"acme": 0, "other": 0, "quiet": 0}

    etag = _file(api, acme_id, ALICE).headers["etag"]
    assert _file(api, acme_id, ALICE, Range="bytes=0-9").status_code == 206
    assert _file(api, acme_id, ALICE, **{"If-None-Match": etag}).status_code == 304
    assert _file(api, acme_id, ALICE, Range=f"bytes={acme_size}-").status_code == 416
    link = api.post(f"/api/v1/exports/{acme_id}/links", ALICE).json()
    assert api.client.get(urlparse(link["url"]).path).status_code == 200
    assert api.delete(f"/api/v1/links/{link['id']}", ALICE).status_code == 204
    assert api.client.get(urlparse(link["url"]).path).status_code == 410
    assert _file(api, other_id, BOB).status_code == 200

    found = _scrape(api)
    assert found["qexport_downloads_total"] == {"acme": 3, "other": 1, "quiet": 0}
    assert found["qexport_downloaded_bytes_total"] == {
        "acme": acme_size + 10 + acme_size,
        "other": other_size,
        "quiet": 0,
    }
    assert found[PUBLIC] == {"acme": 1, "other": 0, "quiet": 0}


def test_a_presigned_download_counts_without_bytes(api_on_s3: Api) -> None:
    """On S3 a download is a presigned URL handed out (307), by a member or through a public
    link: it counts as a download (and a link use), and adds no bytes, qexport sees none."""
    api = api_on_s3
    (acme_id, _), (other_id, _) = _two_workspaces(api)

    assert _file(api, acme_id, ALICE).status_code == 307
    link = api.post(f"/api/v1/exports/{acme_id}/links", ALICE).json()
    path = urlparse(link["url"]).path
    assert api.client.get(path, follow_redirects=False).status_code == 307
    assert _file(api, other_id, BOB).status_code == 307

    found = _scrape(api)
    assert found["qexport_downloads_total"] == {"acme": 2, "other": 1}
    assert found["qexport_downloaded_bytes_total"] == {"acme": 0, "other": 0}
    assert found[PUBLIC] == {"acme": 1, "other": 0}


def test_a_prune_takes_its_events_off_the_figures(api_both: Api) -> None:
    """The figures cover the audit events kept: a prune lowers them by exactly the downloads
    it deleted, and later downloads count from there."""
    api = api_both
    (acme_id, acme_size), (other_id, other_size) = _two_workspaces(api)
    assert _file(api, acme_id, ALICE).status_code == 200
    assert _file(api, other_id, BOB).status_code == 200
    api.clock.advance(3 * 86400)
    assert _file(api, acme_id, ALICE, Range="bytes=0-9").status_code == 206

    pruned = audit_trail.prune(
        api.context.audit,
        api.context.objects,
        api.clock,
        retention_days=1,
        checkpoint_every=api.context.settings.audit_checkpoint_every,
    )
    assert pruned.deleted
    assert not pruned.checkpoints.failed

    found = _scrape(api)
    assert found["qexport_downloads_total"] == {"acme": 1, "other": 0}
    assert found["qexport_downloaded_bytes_total"] == {"acme": 10, "other": 0}
    assert _file(api, other_id, BOB).status_code == 200
    assert _scrape(api)["qexport_downloaded_bytes_total"] == {"acme": 10, "other": other_size}
    assert acme_size > 10


def test_events_that_could_not_be_recorded_are_counted(
    api: Api, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A download whose event cannot be written still sends its file; the process's
    qexport_audit_record_failures_total counts it, and the download figures do not."""
    (acme_id, _), _ = _two_workspaces(api)
    assert _scalar(api, "qexport_audit_record_failures_total") == 0

    def broken(*_args: object) -> None:
        raise RuntimeError("the database refused the write")

    monkeypatch.setattr(audit_log, "append_all_in", broken)
    assert _file(api, acme_id, ALICE).status_code == 200
    monkeypatch.undo()

    assert _scalar(api, "qexport_audit_record_failures_total") == 1
    assert _scrape(api)["qexport_downloads_total"]["acme"] == 0
