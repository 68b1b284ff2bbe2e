"""The demo database: deterministic, related, atomic to build, and queryable by the source."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import duckdb
import pyarrow as pa
import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import QExportError
from qexport.sources import demo_data
from qexport.sources.demo_data import build_demo_database
from qexport.sources.duckdb.source import DuckDBSource

ORDERS = 5_000
CHECKSUM_SQL = """
SELECT
    (SELECT md5(string_agg(o::VARCHAR, '|' ORDER BY order_id)) FROM orders o) AS orders,
    (SELECT md5(string_agg(c::VARCHAR, '|' ORDER BY customer_id)) FROM customers c) AS customers,
    (SELECT md5(string_agg(p::VARCHAR, '|' ORDER BY product_id)) FROM products p) AS products
"""


def _query(path: Path, sql: str) -> list[tuple[Any, ...]]:
    con = duckdb.connect(str(path), read_only=True)
    try:
        return con.sql(sql).fetchall()
    finally:
        con.close()


@pytest.fixture(scope="module")
def small_demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build_demo_database(path, orders=ORDERS)
    return path


def test_two_builds_with_the_same_seed_hold_the_same_data(
    small_demo_db: Path, tmp_path: Path
) -> None:
    """Generation is deterministic: a second build has identical tables; another seed differs."""
    again = tmp_path / "again.duckdb"
    other_seed = tmp_path / "other.duckdb"
    build_demo_database(again, orders=ORDERS)
    build_demo_database(other_seed, orders=ORDERS, seed=7)

    assert _query(again, CHECKSUM_SQL) == _query(small_demo_db, CHECKSUM_SQL)
    assert _query(other_seed, CHECKSUM_SQL)[0][0] != _query(small_demo_db, CHECKSUM_SQL)[0][0]


def test_tables_have_the_promised_sizes_and_relations(small_demo_db: Path) -> None:
    """Orders reference existing customers and products, at the product's price."""
    counts = _query(
        small_demo_db,
        "SELECT (SELECT count(*) FROM orders), (SELECT count(*) FROM customers),"
        " (SELECT count(*) FROM products)",
    )
    assert counts == [(ORDERS, 100, 1000)]
    dangling = _query(
        small_demo_db,
        "SELECT count(*) FROM orders o"
        " LEFT JOIN customers c USING (customer_id) LEFT JOIN products p USING (product_id)"
        " WHERE c.customer_id IS NULL OR p.product_id IS NULL"
        " OR o.unit_price <> p.unit_price OR o.total <> o.quantity * o.unit_price",
    )
    assert dangling == [(0,)]
    types = dict(_query(small_demo_db, "SELECT column_name, column_type FROM (DESCRIBE orders)"))
    assert types["unit_price"] == "DECIMAL(10,2)"
    assert types["total"] == "DECIMAL(12,2)"
    assert types["ordered_at"] == "TIMESTAMP"


def test_notes_mix_nulls_unicode_and_formula_looking_text(small_demo_db: Path) -> None:
    """The demo data exercises NULLs, non-ASCII text and strings a spreadsheet would evaluate."""
    [(nulls, non_ascii, formulas, hyperlinks, phones)] = _query(
        small_demo_db,
        "SELECT count(*) FILTER (WHERE note IS NULL),"
        " count(*) FILTER (WHERE NOT regexp_matches(note, '^[ -~]*$')),"
        " count(*) FILTER (WHERE regexp_matches(note, '^[=+@-]')),"
        " count(*) FILTER (WHERE note LIKE '=HYPERLINK(%'),"
        " count(*) FILTER (WHERE note = '+1 555 0100')"
        " FROM orders",
    )
    assert 0 < nulls < ORDERS
    assert non_ascii > 0
    assert 0 < formulas < ORDERS // 20  # a few, not many
    assert hyperlinks > 0
    assert phones > 0


def test_customers_belong_to_two_workspaces(small_demo_db: Path) -> None:
    """customers.workspace_id is 'demo' or 'acme', both present."""
    workspaces = _query(small_demo_db, "SELECT DISTINCT workspace_id FROM customers ORDER BY 1")
    assert workspaces == [("acme",), ("demo",)]


def test_the_source_restricts_rows_with_the_requesters_workspace(small_demo_db: Path) -> None:
    """A demo query filtered by $workspace_id returns only that workspace's orders."""
    sql = (
        "SELECT count(*) AS n FROM orders JOIN customers USING (customer_id)"
        " WHERE workspace_id = $workspace_id"
    )
    source = DuckDBSource("demo", small_demo_db)
    try:
        counts = {}
        for workspace in ("demo", "acme"):
            stream = source.execute(sql, {}, Requester("u", workspace), timeout_seconds=30)
            counts[workspace] = pa.Table.from_batches(list(stream)).to_pylist()[0]["n"]
            stream.close()
    finally:
        source.close()
    assert counts["demo"] > 0
    assert counts["acme"] > 0
    assert counts["demo"] + counts["acme"] == ORDERS


def test_an_identical_database_is_not_rebuilt(tmp_path: Path) -> None:
    """Asking again for the same size and seed keeps the existing file; another size rebuilds."""
    path = tmp_path / "demo.duckdb"
    first = build_demo_database(path, orders=500)
    inode = path.stat().st_ino

    second = build_demo_database(path, orders=500)
    assert first.built
    assert not second.built
    assert path.stat().st_ino == inode

    bigger = build_demo_database(path, orders=800)
    assert bigger.built
    assert _query(path, "SELECT count(*) FROM orders") == [(800,)]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.duckdb"]


def test_a_failed_build_leaves_the_previous_database_and_no_temp_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A build that dies midway never replaces or half-writes the database at the path."""
    path = tmp_path / "demo.duckdb"
    build_demo_database(path, orders=300)
    before = _query(path, CHECKSUM_SQL)
    monkeypatch.setattr(demo_data, "_ORDERS_SQL", "CREATE TABLE orders AS SELECT broken(")

    with pytest.raises(QExportError, match="could not build the demo database"):
        build_demo_database(path, orders=400)

    assert _query(path, CHECKSUM_SQL) == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["demo.duckdb"]
