"""The sensitive-tables rule of a workspace's policy, without a source: how a written table is
checked and named as each engine names it, and which recorded reads hit it."""

from __future__ import annotations

from typing import Any

import pytest

from qexport.domain.exports import Requester
from qexport.domain.failures import InvalidRequestError
from qexport.domain.policies import PolicyLimits, WorkspacePolicy, changed_policy
from qexport.domain.queries import Query
from qexport.domain.sensitivity import (
    CANNOT_SAY,
    ReadsReported,
    ReadsReporting,
    Relation,
    SensitiveTable,
    table_rules,
    written_rule,
)
from qexport.services.sensitivity import sensitivity_now
from tests.fakes import FixedSources, InMemoryCatalog
from tests.unit.fakes import FakeSource

DUCKDB = ReadsReporting(ReadsReported.COLUMNS, default_schema="main")
POSTGRES = ReadsReporting(ReadsReported.COLUMNS, default_schema="public", case_sensitive=True)
MYSQL_NO_DB = ReadsReporting(ReadsReported.TABLES, default_schema=None)
SOURCES = {"shop": DUCKDB, "pg": POSTGRES, "crm": MYSQL_NO_DB, "spark": CANNOT_SAY}


def _rules(*entries: dict[str, Any]) -> tuple[SensitiveTable, ...]:
    return table_rules(list(entries), SOURCES)


def _problems(*entries: dict[str, Any]) -> dict[str, str]:
    with pytest.raises(InvalidRequestError) as caught:
        _rules(*entries)
    return {p.field or "": p.detail for p in caught.value.problems}


def test_a_table_is_named_as_its_engine_names_it() -> None:
    """The schema defaults per engine; DuckDB folds every name, PostgreSQL folds unquoted
    names and keeps quoted ones; two entries of one table merge (the whole table wins)."""
    assert _rules({"source": "shop", "table": "Customers", "columns": ["EMAIL"]}) == (
        SensitiveTable("shop", "main", "customers", frozenset({"email"})),
    )
    assert _rules(
        {"source": "pg", "table": 'Sales."Customers"', "columns": ['"Phone"', "Email"]}
    ) == (SensitiveTable("pg", "sales", "Customers", frozenset({"Phone", "email"})),)
    merged = _rules(
        {"source": "shop", "table": "main.customers", "columns": ["email"]},
        {"source": "shop", "table": "customers", "columns": ["phone"]},
        {"source": "pg", "table": "payments"},
        {"source": "pg", "table": "public.payments", "columns": ["iban"]},
    )
    assert merged == (
        SensitiveTable("pg", "public", "payments", None),
        SensitiveTable("shop", "main", "customers", frozenset({"email", "phone"})),
    )


def test_every_mistake_of_every_entry_is_refused_at_once_naming_it() -> None:
    """An unknown source names the known ones; a name with too many parts, an empty column
    list, an unterminated quote, and a table without a schema on a source that has no
    default one are each refused on their entry's field."""
    problems = _problems(
        {"source": "nope", "table": "t"},
        {"source": "shop", "table": "a.b.c"},
        {"source": "shop", "table": "t", "columns": []},
        {"source": "pg", "table": '"open'},
        {"source": "crm", "table": "customers"},
        {"source": "shop", "table": "t", "extra": 1},
        "customers",
        {"source": "shop", "table": '"a\x00b"'},
    )
    assert problems["sensitive_tables[0].source"] == (
        "unknown source 'nope' (the workspace's sources: crm, pg, shop, spark)"
    )
    assert "more than a schema and a table" in problems["sensitive_tables[1].table"]
    assert "non-empty list" in problems["sensitive_tables[2].columns"]
    assert "unterminated quote" in problems["sensitive_tables[3].table"]
    assert "name the schema of 'customers'" in problems["sensitive_tables[4].table"]
    assert "unknown key 'extra'" in problems["sensitive_tables[5]"]
    assert "an entry is" in problems["sensitive_tables[6]"]
    assert "cannot hold control characters" in problems["sensitive_tables[7].table"]


def test_a_column_rule_is_hit_only_by_a_read_of_its_columns() -> None:
    """Whole-table rules are hit by any read of the table; column rules by a read of one of
    their columns, or of the table with its columns unknown; a source that cannot say is
    taken to read every table of it (and only of it)."""
    email = SensitiveTable("shop", "main", "customers", frozenset({"email"}))
    whole = SensitiveTable("shop", "main", "customers")
    names = frozenset({Relation("main", "customers", frozenset({"id", "name"}))})
    emails = frozenset({Relation("main", "customers", frozenset({"email"}))})
    unknown_columns = frozenset({Relation("main", "customers", None)})
    counted = frozenset({Relation("main", "customers", frozenset())})
    assert not email.hit_by("shop", names)
    assert email.hit_by("shop", emails)
    assert email.hit_by("shop", unknown_columns)
    assert not email.hit_by("shop", counted)
    assert whole.hit_by("shop", counted)
    assert not whole.hit_by("shop", frozenset({Relation("archive", "customers", None)}))
    assert email.hit_by("shop", None)
    assert not email.hit_by("other", None)


def test_a_copy_of_a_query_is_as_sensitive_as_the_query() -> None:
    """The policy judges what a query reads, not its id: another query with the same reads
    needs approval too, and says why; a query marked by id still does whatever it reads; a
    query saved before reads were recorded, on a source with a sensitive table, does."""
    policy = WorkspacePolicy(
        sensitive_tables=(SensitiveTable("shop", "main", "customers"),),
        sensitive_queries=frozenset({"q-marked"}),
    )
    reads = frozenset({Relation("main", "customers", frozenset({"email"}))})
    copy = Query("q-copy", "acme", "my copy", "SELECT email FROM customers", "shop", reads=reads)
    assert policy.sensitivity([copy]) == (
        "the query 'my copy' reads shop: main.customers, which the workspace's policy marks"
        " sensitive"
    )
    orders = frozenset({Relation("main", "orders", frozenset({"id"}))})
    unrelated = Query("q-orders", "acme", "orders", "SELECT id FROM orders", "shop", reads=orders)
    assert not policy.needs_approval([unrelated])
    assert policy.needs_approval(
        [Query("q-marked", "acme", "m", "SELECT 1", "shop", reads=frozenset())]
    )
    unrecorded = Query("q-old", "acme", "old", "SELECT 1", "shop")
    assert "cannot say which tables the query 'old' reads" in (
        policy.sensitivity([unrecorded]) or ""
    )
    elsewhere = Query("q-pg", "acme", "pg", "SELECT 1", "pg")
    assert not policy.needs_approval([elsewhere])


def test_a_rule_written_on_a_line_reads_back_as_the_policy_lists_it() -> None:
    """The policy page and the CLI take `SOURCE: TABLE (COLUMNS)` (a parenthesis or a comma
    inside quotes is a name's; an overlong line is refused at once); the policy lists its
    rules the same way, quoted where a name needs it, so that a listed rule reads back."""
    assert written_rule("shop: main.customers (email, phone)") == {
        "source": "shop",
        "table": "main.customers",
        "columns": ["email", "phone"],
    }
    assert written_rule(" crm : payments ") == {"source": "crm", "table": "payments"}
    with pytest.raises(InvalidRequestError, match=r"is not a table: write SOURCE: SCHEMA\.TABLE"):
        written_rule("customers")
    with pytest.raises(InvalidRequestError, match="is not a table"):
        written_rule("shop: t" + " (" * 50_000)  # read in one pass, refused for its length
    assert written_rule('shop: "a(b".t ("x,y", z)') == {
        "source": "shop",
        "table": '"a(b".t',
        "columns": ['"x,y"', "z"],
    }
    rule = SensitiveTable("pg", "public", "Customers", frozenset({"Phone", "email"}))
    assert rule.words() == 'pg: public."Customers" ("Phone", email)'
    assert _rules(written_rule(rule.words())) == (rule,)


def test_the_policy_stores_its_tables_and_checks_them_when_changed() -> None:
    """A change of `sensitive_tables` is checked against the workspace's sources; the policy
    stores and lists what it was changed to, and a stored policy reads back the same."""
    limits = PolicyLimits(frozenset({"csv"}), 1_000, 7, sources=SOURCES)
    policy = changed_policy(
        WorkspacePolicy(),
        {"sensitive_tables": [{"source": "shop", "table": "customers", "columns": ["email"]}]},
        limits,
    )
    assert policy.to_json()["sensitive_tables"] == [
        {"source": "shop", "schema": "main", "table": "customers", "columns": ["email"]}
    ]
    assert WorkspacePolicy.from_json(policy.to_json()) == policy
    assert (
        "sensitive tables: shop: main.customers (email), read only with an admin's approval"
        in policy.describe()
    )
    lifted = changed_policy(policy, {"sensitive_tables": None}, limits)
    assert lifted.sensitive_tables == ()
    with pytest.raises(InvalidRequestError) as caught:
        changed_policy(
            WorkspacePolicy(),
            {"sensitive_tables": [{"source": "x", "table": "t"}]},
            PolicyLimits(frozenset({"csv"}), 1_000, 7),
        )
    assert caught.value.problems[0].field == "sensitive_tables[0].source"


def test_what_a_run_finds_is_added_to_the_query_record_never_taken_off() -> None:
    """The planner asked again at run time: a table read newly is recorded on the query (its
    next request is judged by it); a run that reads less (other values) takes nothing off."""
    orders = Relation("main", "orders", frozenset({"id"}))
    customers = Relation("main", "customers", frozenset({"email"}))
    catalog = InMemoryCatalog()
    query = catalog.add_query(
        Query("q1", "acme", "q", "SELECT * FROM v", "shop", reads=frozenset({orders}))
    )
    policy = WorkspacePolicy(sensitive_tables=(SensitiveTable("shop", "main", "customers"),))
    source = FakeSource(reads=frozenset({customers}))
    ann = Requester("ann", "acme")

    def judged(current: Query) -> str | None:
        sources = FixedSources({"shop": source})
        return sensitivity_now(policy, sources, catalog, ann, [(current, {})], timeout_seconds=5)

    assert not policy.needs_approval([query])  # as recorded when saved
    assert judged(query) == (
        "the query 'q' reads shop: main.customers, which the workspace's policy marks sensitive"
    )
    grown = catalog.get_query("q1")
    assert grown is not None
    assert grown.reads == frozenset({orders, customers})
    assert policy.needs_approval([grown])
    source.reads = frozenset()
    assert judged(grown) is None
    assert catalog.get_query("q1") == grown
