"""GET /api/v1/exports/{id}/file: the bytes with their headers, byte ranges and validators,
each refusal with its documented status, and a presigned redirect on S3."""

from __future__ import annotations

import hashlib
import shutil
import time
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlparse

import pytest
from fastapi.testclient import TestClient

from qexport import bootstrap
from qexport.app import create_app
from qexport.config import Settings
from qexport.domain.queries import Visibility
from qexport.http.download import CHUNK_BYTES
from tests.api.conftest import SOURCE, Api
from tests.fakes import FrozenClock
from tests.support import queue_helpers

pytest_plugins = ["tests.support.s3server"]

ALICE = "alice@acme.test"
BOB = "bob@acme.test"
DAY = 24 * 3600


def _request(api: Api, who: str = ALICE, fmt: str = "csv", query: str = "q-orders-acme") -> str:
    response = api.post("/api/v1/exports", who, json={"query_id": query, "format": fmt})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


def _file(api: Api, export_id: str, who: str = ALICE, **headers: str) -> Any:
    return api.client.get(
        f"/api/v1/exports/{export_id}/file",
        headers={**api.headers(who), **headers},
        follow_redirects=False,
    )


def _problem(response: Any, status: int, code: str) -> None:
    assert response.status_code == status, response.text
    assert response.headers["content-type"] == "application/problem+json"
    assert response.json()["code"] == code


@pytest.fixture
def done(api: Api) -> tuple[Api, str, bytes]:
    """Alice's succeeded csv export of the orders query, and its bytes."""
    api.member(ALICE, "viewer")
    api.member(BOB, "viewer")
    api.add_query("orders")
    export_id = _request(api)
    assert api.drain() == {"succeeded": 1}
    body = _file(api, export_id).content
    return api, export_id, body


def test_the_file_comes_with_its_headers(done: tuple[Api, str, bytes]) -> None:
    """200 with the media type, an attachment file name, the sha256 as ETag, the length,
    and ranges advertised."""
    api, export_id, body = done
    response = _file(api, export_id)
    export = api.get(f"/api/v1/exports/{export_id}", ALICE).json()
    assert response.status_code == 200
    assert response.content == body
    assert hashlib.sha256(body).hexdigest() == export["sha256"]
    assert response.headers["content-type"] == "text/csv; charset=utf-8"
    assert response.headers["etag"] == f'"{export["sha256"]}"'
    assert response.headers["content-length"] == str(export["size_bytes"])
    assert response.headers["accept-ranges"] == "bytes"
    assert response.headers["content-disposition"] == (
        "attachment; filename=\"orders_2026-01-05.csv\"; filename*=UTF-8''orders_2026-01-05.csv"
    )


def test_a_unicode_query_name_gives_a_safe_file_name(api: Api) -> None:
    """A query named with accents, slashes and quotes downloads under a plain ASCII name."""
    api.member(ALICE, "viewer")
    query = api.add_query('Ventes été / "2024"\\..')
    export_id = _request(api, fmt="jsonl", query=query.id)
    api.drain()
    response = _file(api, export_id)
    assert response.status_code == 200
    assert response.headers["content-type"] == "application/x-ndjson"
    assert response.headers["content-disposition"] == (
        'attachment; filename="Ventes-ete-2024_2026-01-05.jsonl";'
        " filename*=UTF-8''Ventes-ete-2024_2026-01-05.jsonl"
    )
    assert response.content.count(b"\n") == 100


def test_single_byte_ranges_get_206(done: tuple[Api, str, bytes]) -> None:
    """first-last, first- and -suffix ranges answer 206 with Content-Range and those bytes;
    a range past the end is clipped."""
    api, export_id, body = done
    size = len(body)
    for header, first, last in (
        ("bytes=0-9", 0, 9),
        ("bytes=100-", 100, size - 1),
        ("bytes=-25", size - 25, size - 1),
        (f"bytes=10-{size + 1000}", 10, size - 1),
    ):
        response = _file(api, export_id, Range=header)
        assert response.status_code == 206, header
        assert response.content == body[first : last + 1], header
        assert response.headers["content-range"] == f"bytes {first}-{last}/{size}"
        assert response.headers["content-length"] == str(last - first + 1)


def test_unsatisfiable_ranges_get_416_and_odd_ones_the_whole_file(
    done: tuple[Api, str, bytes],
) -> None:
    """A range starting past the end is 416 with `bytes */size`; several ranges, malformed
    ones, or an If-Range that does not match get the whole file."""
    api, export_id, body = done
    size = len(body)
    for header in (f"bytes={size}-", "bytes=-0"):
        response = _file(api, export_id, Range=header)
        _problem(response, 416, "range_not_satisfiable")
        assert response.headers["content-range"] == f"bytes */{size}"
    for header in ("bytes=0-1,5-6", "bytes=9-3", "items=0-5", "bytes=x-"):
        response = _file(api, export_id, Range=header)
        assert (response.status_code, response.content) == (200, body), header
    stale = _file(api, export_id, Range="bytes=0-9", **{"If-Range": '"other"'})
    assert (stale.status_code, stale.content) == (200, body)
    etag = stale.headers["etag"]
    current = _file(api, export_id, Range="bytes=0-9", **{"If-Range": etag})
    assert (current.status_code, current.content) == (206, body[:10])


def test_a_file_of_several_chunks_streams_whole_and_in_ranges(api: Api) -> None:
    """A file larger than one chunk (streamed) and a file or range of at most one (sent
    whole) arrive byte for byte, each download recorded once with the bytes it sent."""
    api.member(ALICE, "viewer")
    pad = "x" * 120
    api.add_query("wide", sql=f"SELECT range AS n, '{pad}' AS pad FROM range(6000)", parameters=())
    export_id = _request(api, query="q-wide-acme")
    assert api.drain() == {"succeeded": 1}
    whole = _file(api, export_id)
    size = len(whole.content)
    assert size > 2 * CHUNK_BYTES
    assert whole.content.count(b"\n") == 6001
    assert (
        hashlib.sha256(whole.content).hexdigest()
        == api.get(f"/api/v1/exports/{export_id}", ALICE).json()["sha256"]
    )
    across = _file(api, export_id, Range=f"bytes={CHUNK_BYTES - 10}-{CHUNK_BYTES + 9}")
    assert (across.status_code, across.content) == (
        206,
        whole.content[CHUNK_BYTES - 10 : CHUNK_BYTES + 10],
    )
    longest_whole = _file(api, export_id, Range=f"bytes=5-{CHUNK_BYTES + 4}")
    assert longest_whole.content == whole.content[5 : CHUNK_BYTES + 5]
    past_one_chunk = _file(api, export_id, Range=f"bytes=5-{CHUNK_BYTES + 5}")
    assert past_one_chunk.content == whole.content[5 : CHUNK_BYTES + 6]
    api.member("admin@acme.test", "admin")
    params = {"action": "file.downloaded", "target": export_id}
    events = api.get("/api/v1/audit", "admin@acme.test", params=params)
    assert events.status_code == 200, events.text
    sent = sorted(event["details"]["bytes"] for event in events.json()["items"])
    assert sent == sorted([size, 20, CHUNK_BYTES, CHUNK_BYTES + 1])


def test_a_current_copy_gets_304(done: tuple[Api, str, bytes]) -> None:
    """If-None-Match with the ETag (strong, weak, in a list, or *) answers 304 without a
    body; another tag gets the file."""
    api, export_id, body = done
    etag = _file(api, export_id).headers["etag"]
    for header in (etag, f"W/{etag}", f'"abc", {etag}', "*"):
        response = _file(api, export_id, **{"If-None-Match": header})
        assert (response.status_code, response.content) == (304, b""), header
        assert response.headers["etag"] == etag
    other = _file(api, export_id, **{"If-None-Match": '"abc"'})
    assert (other.status_code, other.content) == (200, body)


def test_a_file_not_ready_yet_is_409_with_retry_after(api: Api) -> None:
    """Queued and running exports answer 409 not_ready with Retry-After."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    export_id = _request(api)
    queued = _file(api, export_id)
    _problem(queued, 409, "not_ready")
    assert int(queued.headers["retry-after"]) > 0
    claimed = queue_helpers.claim(
        api.deps.exports, export_id, worker_id="w1", now=api.clock.now(), lease_seconds=30
    )
    assert claimed is not None
    running = _file(api, export_id)
    _problem(running, 409, "not_ready")
    assert "retry-after" in running.headers


def test_a_failed_export_has_no_file(api: Api) -> None:
    """A failed (here: cancelled) export answers 409 export_failed, without Retry-After."""
    api.member(ALICE, "viewer")
    api.add_query("orders")
    export_id = _request(api)
    api.post(f"/api/v1/exports/{export_id}/cancel", ALICE)
    response = _file(api, export_id)
    _problem(response, 409, "export_failed")
    assert "retry-after" not in response.headers
    assert "cancelled" in response.json()["detail"]


def test_an_expired_file_is_410(done: tuple[Api, str, bytes]) -> None:
    """Once past expires_at (7 days of retention) the file is refused with 410 expired."""
    api, export_id, _ = done
    api.clock.advance(7 * DAY - 1)
    assert _file(api, export_id).status_code == 200
    api.clock.advance(1)
    _problem(_file(api, export_id), 410, "expired")


def test_losing_access_to_the_query_is_403(done: tuple[Api, str, bytes]) -> None:
    """Made members-only without the requester, or deleted: 403 access_lost."""
    api, export_id, _ = done
    query = api.deps.catalog.get_query("q-orders-acme")
    assert query is not None
    members_only = replace(
        query, visibility=Visibility.MEMBERS, members=frozenset({api.user_id(BOB)})
    )
    api.deps.catalog.update_query(members_only)
    _problem(_file(api, export_id), 403, "access_lost")
    api.deps.catalog.update_query(replace(members_only, members=frozenset({api.user_id(ALICE)})))
    assert _file(api, export_id).status_code == 200
    api.deps.catalog.delete_query(query.id)
    _problem(_file(api, export_id), 403, "access_lost")


def test_someone_elses_file_is_404(done: tuple[Api, str, bytes]) -> None:
    """Another member gets 404, as for an id that does not exist; an admin gets the file."""
    api, export_id, body = done
    _problem(_file(api, export_id, BOB), 404, "not_found")
    _problem(_file(api, export_id.replace("-", "0"), ALICE), 404, "not_found")
    api.member("admin@acme.test", "admin")
    assert _file(api, export_id, "admin@acme.test").content == body


# ---------------------------------------------------------------- S3: a presigned redirect


@pytest.fixture
def s3_api(
    tmp_path: Path, source_template: Path, moto_endpoint: str, s3_bucket: str
) -> Iterator[Api]:
    """The `api` fixture's world with its files in an S3 bucket (moto)."""
    source = tmp_path / "shop.duckdb"
    shutil.copy(source_template, source)
    settings = Settings(
        data_dir=tmp_path / "data",
        storage_url=f"s3://{s3_bucket}/tenant",
        s3_endpoint_url=moto_endpoint,
        sources={SOURCE: f"duckdb://{source}"},
        source_workspaces={SOURCE: frozenset({"acme", "other"})},
    )
    settings.data_dir.mkdir()
    clock = FrozenClock()
    deps = bootstrap.build(settings, clock=clock)
    context = deps
    with TestClient(create_app(context), raise_server_exceptions=False) as client:
        yield Api(client, context, deps, clock)


def _presigned(call: Callable[[], Any]) -> tuple[str, float, float]:
    """The redirect's URL and the range of lifetimes (in seconds) its signature can have
    been given, from the wall-clock time around the call (botocore signs with that)."""
    before = time.time()
    response = call()
    after = time.time()
    assert response.status_code == 307, response.text
    location = response.headers["location"]
    expires = int(parse_qs(urlparse(location).query)["Expires"][0])
    return location, expires - after - 1, expires - before + 1


def test_on_s3_the_file_is_a_redirect_that_never_outlives_the_export(s3_api: Api) -> None:
    """307 to a presigned URL that serves the same bytes; its validity is short and ends no
    later than the export's expiry. Public links redirect the same way."""
    api = s3_api
    api.member(ALICE, "viewer")
    api.add_query("orders")
    export_id = _request(api)
    assert api.drain() == {"succeeded": 1}
    export = api.get(f"/api/v1/exports/{export_id}", ALICE).json()

    location, shortest, longest = _presigned(lambda: _file(api, export_id))
    assert shortest <= 300 <= longest  # the store's default: far less than the 7 days left
    with urllib.request.urlopen(location, timeout=10) as response:  # noqa: S310 (moto)
        body = response.read()
    assert hashlib.sha256(body).hexdigest() == export["sha256"]

    link = api.post(f"/api/v1/exports/{export_id}/links", ALICE).json()
    api.clock.advance(7 * DAY - 42)  # 42 seconds left before the export expires
    _, shortest, longest = _presigned(lambda: _file(api, export_id))
    assert shortest <= 42 <= longest
    path = urlparse(link["url"]).path
    public = api.client.get(path, follow_redirects=False)
    assert public.headers["referrer-policy"] == "no-referrer"
    _, shortest, longest = _presigned(lambda: api.client.get(path, follow_redirects=False))
    assert shortest <= 42 <= longest
