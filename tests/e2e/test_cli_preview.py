"""`qexport queries preview NAME` as a subprocess: a query's first rows as a table that fits
the terminal (or JSON), locally and through a server, refusals as one line; nothing saved."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from tests.e2e.conftest import Env
from tests.e2e.test_serve import SMALL_ORDERS, N, new_token, start_server

WIDE = (
    "SELECT order_id, customer_id, product_id, ordered_at, quantity, unit_price, total, status,"
    " note, repeat('x', 3000) AS filler FROM orders WHERE order_id <= $n ORDER BY order_id"
)


@pytest.fixture
def local(env: Env) -> Env:
    env.add_query("small_orders", SMALL_ORDERS, N)
    env.add_query("wide_orders", WIDE, N)
    return env


def _json(cli: Env, *args: str) -> Any:
    return json.loads(cli.run("queries", "preview", *args, "--json").stdout)


def test_a_query_previews_as_a_table(local: Env) -> None:
    """The rows with the column names and types, how many, and that nothing was saved; no
    export is recorded."""
    proc = local.run("queries", "preview", "small_orders", "--param", "n=3")
    lines = proc.stdout.splitlines()
    assert lines[0].split() == ["order_id", "total"]
    assert lines[1].split() == ["BIGINT", "DECIMAL(12,2)"]
    assert [line.split()[0] for line in lines[2:5]] == ["1", "2", "3"]
    assert lines[-1] == "3 rows; nothing was saved"
    assert local.store.list_exports(workspace_id="demo") == []


def test_json_carries_exact_cells_and_the_caps(local: Env) -> None:
    """--json prints the API's answer: decimals as text, the row count, the caps hit."""
    found = _json(local, "small_orders", "--param", "n=500")
    assert found["columns"] == [
        {"name": "order_id", "type": "BIGINT"},
        {"name": "total", "type": "DECIMAL(12,2)"},
    ]
    assert found["row_count"] == 100
    assert found["more_rows"] is True
    assert found["truncated"] is True
    assert all(isinstance(total, str) and "." in total for _, total in found["rows"])
    assert _json(local, "small_orders", "--limit", "7")["row_count"] == 7


def test_the_table_fits_the_terminal(local: Env) -> None:
    """Ten columns, one of 3,000 characters, in a 60-column terminal: no line is wider, each
    row is one line with its cells cut with an ellipsis, the columns that do not fit are
    named as left out; the summary says texts were cut."""
    narrow = Env(local.data_dir, {"COLUMNS": "60"})
    proc = narrow.run("queries", "preview", "wide_orders", "--param", "n=4")
    lines = proc.stdout.splitlines()
    assert max(len(line) for line in lines) <= 60, proc.stdout
    assert lines[0].split()[0] == "order…"
    assert [line.split()[0] for line in lines[2:6]] == ["1", "2", "3", "4"]
    assert all("…" in line for line in lines[2:6])
    summary = " ".join(lines[6:])
    assert summary.startswith("4 rows; 4 texts longer than 1,000 characters cut;")
    assert "more columns did not fit (see --json)" in summary
    wide = Env(local.data_dir, {"COLUMNS": "200"})
    lines = wide.run("queries", "preview", "wide_orders", "--param", "n=4").stdout.splitlines()
    assert lines[0].split()[:3] == ["order_id", "customer_id", "product_id"]
    assert max(len(line) for line in lines) <= 200


def test_refusals_are_one_line(local: Env) -> None:
    """A bad parameter names the option (exit 2); an unknown query is refused (exit 2); a
    statement the source refuses says why (exit 1)."""
    proc = local.run("queries", "preview", "small_orders", "--param", "n=many", check=False)
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: --param n: parameter 'n' must be an integer")
    proc = local.run("queries", "preview", "no_such_query", check=False)
    assert proc.returncode == 2
    assert "no query 'no_such_query' that you can read" in proc.stderr
    local.add_query("broken", "SELECT * FROM no_such_table")
    proc = local.run("queries", "preview", "broken", check=False)
    assert proc.returncode == 1
    assert "no_such_table" in proc.stderr
    assert "(query_invalid)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_through_a_server_the_answer_is_the_same(local: Env, tmp_path: Path) -> None:
    """With QEXPORT_URL and QEXPORT_TOKEN the query is found by name on the server and the
    rows are those of the local preview; the client's data dir is never made."""
    here = _json(local, "small_orders", "--param", "n=5")
    url, _ = start_server(local)
    token = new_token(local, "ann@example.com", role="viewer")
    client = Env(tmp_path / "client", {"QEXPORT_URL": url, "QEXPORT_TOKEN": token})
    remote = _json(client, "small_orders", "--param", "n=5")
    assert remote["rows"] == here["rows"]
    assert remote["row_count"] == 5
    table = client.run("queries", "preview", "small_orders", "--param", "n=2").stdout
    assert table.splitlines()[-1] == "2 rows; nothing was saved"
    proc = client.run("queries", "preview", "small_orders", "--param", "n=x", check=False)
    assert proc.returncode == 2
    assert "(invalid_request)" in proc.stderr
    assert not client.data_dir.exists()


def test_a_local_preview_is_recorded_and_listed(local: Env) -> None:
    """The CLI's own preview is a `query.previewed` event of its requester, with the values
    given and the rows shown; `qexport audit list` shows it with its details."""
    local.run("queries", "preview", "small_orders", "--param", "n=3")
    [found] = local.json("audit", "list", "--action", "query.previewed")["items"]
    assert found["actor"] == {"kind": "user", "id": "alice"}
    assert found["target"]["kind"] == "query"
    assert found["outcome"] == "ok"
    assert found["details"]["query_name"] == "small_orders"
    assert found["details"]["parameters"] == {"n": 3}
    assert found["details"]["rows"] == 3
    wide = Env(local.data_dir, {"COLUMNS": "250"})  # a terminal the table fits in
    [row] = [line for line in wide.run("audit", "list").stdout.splitlines() if "query." in line]
    assert "user:alice" in row
    assert "query.previewed" in row
    assert "parameters: n=3; query_name: small_orders; rows: 3" in row


def test_local_previews_are_rationed_and_bounded(local: Env) -> None:
    """Past QEXPORT_PREVIEW_PER_MINUTE the next preview is refused in one line saying when
    to try again (exit 1); a statement that needs a gigabyte fails limit_exceeded naming the
    limit, in one line, and the command's process never grew for it."""
    local.add_query("huge", "SELECT length(repeat('x', 1000000000)) AS n")
    limited = Env(local.data_dir, {"QEXPORT_PREVIEW_PER_MINUTE": "2"})
    limited.run("queries", "preview", "small_orders")
    proc = limited.run("queries", "preview", "huge", check=False)
    assert proc.returncode == 1
    assert "QEXPORT_PREVIEW_MAX_MEMORY" in proc.stderr
    assert "(limit_exceeded)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    proc = limited.run("queries", "preview", "small_orders", check=False)
    assert proc.returncode == 1
    assert "2 previews in the last minute" in proc.stderr
    assert "(too_many_requests)" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
