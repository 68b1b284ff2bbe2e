"""GET /api/v1/exports as people page and narrow it: each filter, filters together, every bad
value named in one 422, cursors both ways that keep the filters; and who sees what whatever
they pass (DESIGN section 7): a viewer and a member their own exports, an admin the
workspace's, another workspace's member none of them."""

from __future__ import annotations

import base64
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any
from urllib.parse import urlencode

import pytest

from qexport.domain.cursors import encode_page_cursor
from tests.api.conftest import Api

ALICE = "alice@acme.test"  # an editor
BOB = "bob@acme.test"  # an editor
VERA = "vera@acme.test"  # a viewer
ADMIN = "admin@acme.test"
EVE = "eve@other.test"  # an admin of another workspace
ORDERS, REFUNDS = "q-orders-acme", "q-refunds-acme"
DAY = 24 * 3600


@dataclass
class World:
    """Alice's four exports over three days, one each of Bob's, Vera's and Eve's."""

    api: Api
    succeeded: str  # orders csv, day 0 (2026-01-05), drained
    parquet: str  # orders parquet, day 1, queued
    cancelled: str  # refunds csv, day 1, failed/cancelled
    refunds: str  # refunds jsonl, day 2, queued
    bobs: str  # orders csv, day 2
    veras: str  # orders csv, day 2
    eves: str  # another workspace's orders csv, day 2


def _request(api: Api, who: str, query_id: str = ORDERS, fmt: str = "csv") -> str:
    response = api.post("/api/v1/exports", who, json={"query_id": query_id, "format": fmt})
    assert response.status_code == 202, response.text
    return str(response.json()["id"])


@pytest.fixture
def exports_world(api: Api) -> World:
    api.member(ALICE, "editor")
    api.member(BOB, "editor")
    api.member(VERA, "viewer")
    api.member(ADMIN, "admin")
    api.member(EVE, "admin", workspace="other")
    api.add_query("orders")
    api.add_query("refunds")
    api.add_query("orders", workspace="other")
    succeeded = _request(api, ALICE)
    assert api.drain() == {"succeeded": 1}
    api.clock.advance(DAY)
    parquet = _request(api, ALICE, fmt="parquet")
    api.clock.advance(60)
    cancelled = _request(api, ALICE, REFUNDS)
    assert api.post(f"/api/v1/exports/{cancelled}/cancel", ALICE).status_code == 200
    api.clock.advance(DAY)
    refunds = _request(api, ALICE, REFUNDS, fmt="jsonl")
    api.clock.advance(60)
    bobs = _request(api, BOB)
    api.clock.advance(60)
    veras = _request(api, VERA)
    api.clock.advance(60)
    eves = _request(api, EVE, "q-orders-other")
    return World(api, succeeded, parquet, cancelled, refunds, bobs, veras, eves)


def _page(api: Api, who: str, **params: Any) -> dict[str, Any]:
    response = api.get(f"/api/v1/exports?{urlencode(params)}", who)
    assert response.status_code == 200, response.text
    body: dict[str, Any] = response.json()
    return body


def _ids(api: Api, who: str, **params: Any) -> list[str]:
    return [item["id"] for item in _page(api, who, **params)["items"]]


def test_each_filter_keeps_exactly_its_exports(exports_world: World) -> None:
    """status (expired included), format, subject, since and until (a date is its whole UTC
    day; a time is exact), q (any case) and id_prefix each keep just their exports, newest
    first; requested_by naming the member themselves keeps them all."""
    api, w = exports_world.api, exports_world
    mine = [w.refunds, w.cancelled, w.parquet, w.succeeded]
    assert _ids(api, ALICE) == mine
    assert _ids(api, ALICE, status="succeeded") == [w.succeeded]
    assert _ids(api, ALICE, status="failed") == [w.cancelled]
    assert _ids(api, ALICE, status="queued") == [w.refunds, w.parquet]
    assert _ids(api, ALICE, status="running") == []
    assert _ids(api, ALICE, status="expired") == []
    assert _ids(api, ALICE, format="parquet") == [w.parquet]
    assert _ids(api, ALICE, format="jsonl") == [w.refunds]
    assert _ids(api, ALICE, subject=REFUNDS) == [w.refunds, w.cancelled]
    assert _ids(api, ALICE, since="2026-01-06") == [w.refunds, w.cancelled, w.parquet]
    assert _ids(api, ALICE, until="2026-01-06") == [w.cancelled, w.parquet, w.succeeded]
    assert _ids(api, ALICE, since="2026-01-06", until="2026-01-06") == [w.cancelled, w.parquet]
    # 2026-01-06 09:00:00Z is the parquet export's instant: `since` includes it, `until` not
    assert _ids(api, ALICE, since="2026-01-06T09:00:00Z", until="2026-01-06T09:01:00Z") == [
        w.parquet
    ]
    assert _ids(api, ALICE, since="2026-01-06T10:00:00+01:00", until="2026-01-06T09:01:00") == [
        w.parquet  # an offset is converted; a time without one is UTC
    ]
    assert _ids(api, ALICE, q="REFUND") == [w.refunds, w.cancelled]
    assert _ids(api, ALICE, q="nothing like it") == []
    assert _ids(api, ALICE, id_prefix=w.parquet[:6].upper()) == [w.parquet]
    assert _ids(api, ALICE, requested_by=api.user_id(ALICE)) == mine
    api.clock.advance(8 * DAY)  # past the 7-day retention
    assert _ids(api, ALICE, status="expired") == [w.succeeded]
    assert _ids(api, ALICE, status="succeeded") == []


def test_filters_combine(exports_world: World) -> None:
    """Several filters keep only what all of them keep, for a member and an admin."""
    api, w = exports_world.api, exports_world
    assert _ids(api, ALICE, format="csv", subject=ORDERS) == [w.succeeded]
    assert _ids(api, ALICE, status="queued", q="refunds", since="2026-01-07") == [w.refunds]
    assert _ids(api, ALICE, status="failed", format="jsonl") == []
    assert _ids(api, ADMIN, format="csv", subject=ORDERS, since="2026-01-07") == [
        w.veras,
        w.bobs,
    ]
    assert _ids(api, ADMIN, requested_by=api.user_id(BOB), format="csv") == [w.bobs]
    assert _ids(api, ADMIN, requested_by=api.user_id(ALICE), status="queued") == [
        w.refunds,
        w.parquet,
    ]
    assert _ids(api, ADMIN, q="orders", until="2026-01-05") == [w.succeeded]


def test_bad_values_are_refused_in_one_422_naming_each_parameter(exports_world: World) -> None:
    """Every bad filter, the page size and the cursor are named together, in the order of
    the parameters, each with its own message; nothing is listed."""
    query = urlencode(
        {
            "status": "done",
            "format": "docx",
            "subject": "s" * 65,
            "requested_by": "u" * 201,
            "since": "yesterday",
            "until": "2026-13-01",
            "q": "x" * 201,
            "id_prefix": "zz",
            "limit": 0,
            "cursor": "not-a-cursor",
        }
    )
    response = exports_world.api.get(f"/api/v1/exports?{query}", ALICE)
    assert response.status_code == 422, response.text
    assert response.headers["content-type"] == "application/problem+json"
    errors = response.json()["errors"]
    assert [e["field"] for e in errors] == [
        "status",
        "format",
        "subject",
        "requested_by",
        "since",
        "until",
        "q",
        "id_prefix",
        "limit",
        "cursor",
    ]
    assert "'done'" in errors[0]["message"]
    assert "'docx'" in errors[1]["message"]
    assert "at least 4 characters" in errors[7]["message"]
    backwards = exports_world.api.get("/api/v1/exports?since=2026-01-06&until=2026-01-04", ALICE)
    assert backwards.status_code == 422
    assert [e["field"] for e in backwards.json()["errors"]] == ["until"]
    assert "after since" in backwards.json()["errors"][0]["message"]


def test_cursors_go_older_and_back_newer_keeping_the_filters(api: Api) -> None:
    """Seven csv exports among jsonl ones, three a page: next_cursor leads to older pages
    until null, prev_cursor back to exactly the pages seen, with the filter kept (the
    caller passes it again); the newest page has no prev_cursor."""
    api.member(ALICE, "editor")
    api.add_query("orders")
    csv = []
    for n in range(10):
        if n % 3 == 2:
            _request(api, ALICE, fmt="jsonl")
        else:
            csv.append(_request(api, ALICE))
        if n % 2:
            api.clock.advance(1)  # pairs share an instant: the id breaks the tie
    keys = []
    for export_id in csv:
        record = api.deps.exports.get_export(export_id)
        assert record is not None
        keys.append((record.created_at, record.id))
    newest_first = [export_id for _at, export_id in sorted(keys, reverse=True)]
    assert len(newest_first) == 7
    first = _page(api, ALICE, format="csv", limit=3)
    assert first["prev_cursor"] is None
    second = _page(api, ALICE, format="csv", limit=3, cursor=first["next_cursor"])
    third = _page(api, ALICE, format="csv", limit=3, cursor=second["next_cursor"])
    assert third["next_cursor"] is None
    pages = [[i["id"] for i in p["items"]] for p in (first, second, third)]
    assert pages == [newest_first[:3], newest_first[3:6], newest_first[6:]]
    for page in (first, second, third):
        assert {i["format"] for i in page["items"]} == {"csv"}
    back = _page(api, ALICE, format="csv", limit=3, cursor=third["prev_cursor"])
    assert [i["id"] for i in back["items"]] == pages[1]
    front = _page(api, ALICE, format="csv", limit=3, cursor=back["prev_cursor"])
    assert [i["id"] for i in front["items"]] == pages[0]
    assert front["prev_cursor"] is None
    assert front["next_cursor"] is not None


def test_members_and_viewers_see_only_their_own_whatever_they_pass(exports_world: World) -> None:
    """A viewer and a member list only their own exports: no filter, requested_by naming
    someone else, an id prefix or the subject of someone else's export find nothing of
    theirs; the same prefix finds it for an admin."""
    api, w = exports_world.api, exports_world
    alice = api.user_id(ALICE)
    for who, own in ((VERA, w.veras), (BOB, w.bobs)):
        assert _ids(api, who) == [own]
        assert _ids(api, who, requested_by=alice) == []
        assert _ids(api, who, requested_by=alice, status="queued", format="parquet") == []
        assert _ids(api, who, id_prefix=w.parquet[:8]) == []
        assert _ids(api, who, id_prefix=w.parquet) == []
        assert _ids(api, who, subject=REFUNDS) == []
        assert _ids(api, who, subject=ORDERS) == [own]
        assert _ids(api, who, q="refunds") == []
    assert _ids(api, ADMIN, id_prefix=w.parquet[:8]) == [w.parquet]
    assert _ids(api, ADMIN) == [w.veras, w.bobs, w.refunds, w.cancelled, w.parquet, w.succeeded]


def test_another_workspace_sees_none_of_them(exports_world: World) -> None:
    """An admin of another workspace lists only their workspace's exports, whatever
    requester, subject or id prefix of this workspace they name."""
    api, w = exports_world.api, exports_world
    assert _ids(api, EVE) == [w.eves]
    assert _ids(api, EVE, requested_by=api.user_id(ALICE)) == []
    assert _ids(api, EVE, subject=ORDERS) == []
    assert _ids(api, EVE, id_prefix=w.succeeded[:8]) == []
    assert _ids(api, EVE, q="refunds") == []


def test_a_tampered_cursor_moves_the_page_but_never_widens_it(exports_world: World) -> None:
    """A cursor made up by the caller (the far future, another's export as the position, an
    id with SQL in it) only says where the page starts: the caller still gets their own
    exports; a cursor that is not one the API wrote is a 422 naming `cursor`."""
    api, w = exports_world.api, exports_world
    future = datetime(2100, 1, 1, tzinfo=UTC)
    for position in ((future, "ffffffff"), (future, "' OR 1=1 --"), (future, "x" * 64)):
        cursor = encode_page_cursor(position)
        assert _ids(api, BOB, cursor=cursor) == [w.bobs]
        newer = encode_page_cursor((datetime(2000, 1, 1, tzinfo=UTC), position[1]), newer=True)
        assert _ids(api, VERA, cursor=newer) == [w.veras]
    record = api.deps.exports.get_export(w.eves)
    assert record is not None
    at_eves = encode_page_cursor((record.created_at, record.id))
    assert _ids(api, BOB, cursor=at_eves) == [w.bobs]
    assert _ids(api, EVE, cursor=encode_page_cursor((future, w.succeeded))) == [w.eves]

    def raw(text: str) -> str:
        return base64.urlsafe_b64encode(text.encode()).decode().rstrip("=")

    for bad in (
        raw("2026-01-05T09:00:00|"),  # no id
        raw("2026-01-05T09:00:00|abc"),  # a time without a zone
        raw("n|soon|abc"),
        raw("2026-01-05T09:00:00+00:00|" + "a" * 65),
        "%%%",
    ):
        response = api.get(f"/api/v1/exports?{urlencode({'cursor': bad})}", BOB)
        assert response.status_code == 422, (bad, response.text)
        assert [e["field"] for e in response.json()["errors"]] == ["cursor"]
