"""A MySQL/MariaDB statement that is only checked (described when its query is saved, planned
for the policy) leaks no data through the server's error: MariaDB evaluates constant
subqueries while it prepares and plans, and `extractvalue`/`updatexml` put their argument in
the message. The member reads the error's number and why its text is withheld; a syntax
error or an unknown column still reads as the server says it. A preview whose plan fails is
on the record and counts against the preview rate; so does a save whose statement is refused,
the one bit the refusal still tells. On the MySQL source and the generic source over
MariaDB, on a real server (tests/support/mariadb.py)."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest

from qexport.domain.audit import Action, AuditFilter
from qexport.domain.exports import Requester
from qexport.domain.failures import (
    QueryInvalidError,
    StatementRefusedError,
    TooManyRequestsError,
)
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import Query
from qexport.domain.sensitivity import SensitiveTable
from qexport.ports import Source
from qexport.services.describe import Ration, Saving, describe_statement
from qexport.services.looks import Looks
from qexport.services.preview import PreviewDesk, preview_query
from qexport.services.slots import SourceSlots
from qexport.sources.generic.source import GenericSource, engine_for
from tests.fakes import (
    FixedSources,
    FrozenClock,
    InMemoryAccountStore,
    InMemoryAuditLog,
    InMemoryMetadataStore,
    InMemoryRateLimits,
    InProcessPreviews,
)
from tests.support.mariadb import MariaDBServer, mariadb_server, require_mysqlclient

__all__ = ["mariadb_server"]  # the session's server, from tests/support/mariadb.py

require_mysqlclient()  # skips this module without the driver (fails in CI)

from qexport.sources.mysql.source import MySQLSource  # noqa: E402 - needs mysqlclient, checked above

ANN = Requester("ann", "acme")
SECRETS = "(SELECT group_concat(name, '=', salary) FROM salaries)"
LEAKS = {
    "extractvalue": f"SELECT 1 AS x FROM salaries WHERE extractvalue(1, concat(0x7e, {SECRETS}))",
    "updatexml": f"SELECT 1 AS x FROM salaries WHERE updatexml(1, concat(0x7e, {SECRETS}), 1)",
}
# What the server says, as it says it: made of the statement and the catalogue only.
HELPFUL = {
    "SELECT id FROM salaries WHERE": "You have an error in your SQL syntax",
    "SELECT nope FROM salaries": "Unknown column 'nope'",
}


def _withheld(detail: str) -> None:
    assert "MySQL error 1105" in detail
    assert "withheld" in detail
    assert "alice" not in detail
    assert "123456" not in detail


@pytest.fixture(scope="module")
def salaries_maria(mariadb_server: MariaDBServer) -> Iterator[MariaDBServer]:
    mariadb_server.execute(
        f"USE {mariadb_server.database}",
        "CREATE TABLE salaries (name VARCHAR(20), salary INT)",
        "INSERT INTO salaries VALUES ('alice', 123456), ('bob', 98765)",
    )
    yield mariadb_server
    mariadb_server.execute(f"DROP TABLE {mariadb_server.database}.salaries")


@pytest.fixture(params=["mysql", "generic"])
def mysql_or_generic_source(
    request: pytest.FixtureRequest, salaries_maria: MariaDBServer
) -> Source:
    if request.param == "mysql":
        return MySQLSource("maria", salaries_maria.url())
    return GenericSource(
        "maria", engine_for("sqlalchemy+" + salaries_maria.url(scheme="mysql+mysqldb"))
    )


def _describe(source: Source, sql: str) -> None:
    describe_statement(
        FixedSources({"maria": source}),
        InProcessPreviews(FixedSources({"maria": source})),
        ANN,
        source="maria",
        sql=sql,
        parameters=(),
        timeout_seconds=10,
    )


@pytest.mark.parametrize("carrier", sorted(LEAKS))
def test_a_query_saved_reads_the_error_number_never_the_data(
    mysql_or_generic_source: Source, carrier: str
) -> None:
    """Saving the query describes (and plans) it: refused naming MySQL error 1105, without
    the text the server made of the table's rows."""
    with pytest.raises(StatementRefusedError) as caught:
        _describe(mysql_or_generic_source, LEAKS[carrier])
    _withheld(caught.value.detail)


def _probe(threshold: int) -> str:
    """Refused when the first digit of alice's salary (1: ASCII 49) is above `threshold`:
    the server evaluates the branch it takes while it checks the statement (a subquery of
    two rows, error 1242), not the other."""
    first = "(SELECT ascii(substr(salary, 1, 1)) FROM salaries ORDER BY name LIMIT 1)"
    return (
        f"SELECT 1 AS x FROM salaries WHERE IF({first} > {threshold}, (SELECT 1 UNION SELECT 2), 1)"
    )


def test_a_refused_save_is_on_the_record_and_the_31st_in_a_minute_never_reaches_the_source(
    salaries_maria: MariaDBServer,
) -> None:
    """On the MySQL source (it describes and plans on the server), the probe's refusal (a
    bit of the salaries table) is a failed `query.created` event of Ann's, without the
    server's text, and takes one of her 30 previews of the minute; the probe the server
    accepts takes none; the 31st refused save is TooManyRequestsError with a Retry-After,
    and the source is not asked."""
    sources = FixedSources({"maria": MySQLSource("maria", salaries_maria.url())})
    runner = InProcessPreviews(sources)
    audit = InMemoryAuditLog()
    ration = Ration(Looks(InMemoryRateLimits(), FrozenClock(), 30), audit)

    def save(sql: str) -> None:
        describe_statement(
            sources,
            runner,
            ANN,
            source="maria",
            sql=sql,
            parameters=(),
            timeout_seconds=10,
            ration=ration,
            saving=Saving(name="probe"),
        )

    with pytest.raises(StatementRefusedError, match="MySQL error 1242"):
        save(_probe(48))
    save(_probe(49))
    narrow = AuditFilter(action=Action.QUERY_CREATED.value)
    [recorded] = audit.list_events(workspace_id=None, narrow=narrow, limit=100)
    assert (recorded.actor_kind, recorded.actor_id, recorded.outcome) == ("user", "ann", "failed")
    details = json.loads(recorded.details)
    assert (details["name"], details["source"], details["code"]) == (
        "probe",
        "maria",
        "query_invalid",
    )
    assert details["step"] in ("describe", "plan")
    assert "123456" not in recorded.details
    assert "withheld" not in recorded.details
    for _ in range(29):
        with pytest.raises(StatementRefusedError):
            save(_probe(48))
    asked = len(runner.jobs)
    with pytest.raises(TooManyRequestsError) as limited:
        save(_probe(48))
    assert limited.value.retry_after == 60
    assert len(runner.jobs) == asked
    assert len(audit.list_events(workspace_id=None, narrow=narrow, limit=100)) == 30


@pytest.mark.parametrize("carrier", sorted(LEAKS))
def test_a_plan_reads_the_error_number_never_the_data(
    salaries_maria: MariaDBServer, carrier: str
) -> None:
    """EXPLAIN evaluates the subquery too: `relations` (the policy's planner) withholds it."""
    mysql_or_generic_source = MySQLSource("maria", salaries_maria.url())
    with pytest.raises(QueryInvalidError) as caught:
        mysql_or_generic_source.relations(LEAKS[carrier], {}, ANN, timeout_seconds=10)
    _withheld(caught.value.detail)


@pytest.mark.parametrize("sql", sorted(HELPFUL))
def test_a_syntax_error_or_an_unknown_column_reads_as_the_server_says(
    mysql_or_generic_source: Source, sql: str
) -> None:
    with pytest.raises(StatementRefusedError, match=HELPFUL[sql]):
        _describe(mysql_or_generic_source, sql)
    if isinstance(mysql_or_generic_source, MySQLSource):
        with pytest.raises(QueryInvalidError, match=HELPFUL[sql]):
            mysql_or_generic_source.relations(sql, {}, ANN, timeout_seconds=10)


def _desk(source: Source, audit: InMemoryAuditLog, per_minute: int) -> PreviewDesk:
    catalog = InMemoryMetadataStore()
    catalog.add_query(Query("q-leak", "acme", "leak", LEAKS["extractvalue"], "maria"))
    accounts = InMemoryAccountStore()
    clock = FrozenClock()
    accounts.ensure_workspace("acme", now=clock.now())
    table = SensitiveTable("maria", "qexport_test", "salaries")
    accounts.set_workspace_policy("acme", WorkspacePolicy(sensitive_tables=(table,)))
    sources = FixedSources({"maria": source})
    return PreviewDesk(
        catalog=catalog,
        accounts=accounts,
        sources=sources,
        runner=InProcessPreviews(sources),
        slots=SourceSlots(),
        audit=audit,
        rates=InMemoryRateLimits(),
        clock=clock,
        per_minute=per_minute,
        statement_timeout_seconds=30,
    )


def test_a_preview_whose_plan_fails_is_on_the_record_and_counted(
    salaries_maria: MariaDBServer,
) -> None:
    """The policy plans the preview first (the table is marked): the plan's error is withheld,
    the preview is recorded as failed at its plan, and it took one of the minute's previews."""
    audit = InMemoryAuditLog()
    desk = _desk(MySQLSource("maria", salaries_maria.url()), audit, per_minute=1)
    with pytest.raises(QueryInvalidError) as caught:
        preview_query(desk, ANN, query_ref="q-leak")
    _withheld(caught.value.detail)
    narrow = AuditFilter(action=Action.QUERY_PREVIEWED.value)
    [recorded] = audit.list_events(workspace_id=None, narrow=narrow, limit=10)
    assert recorded.outcome == "failed"
    details = json.loads(recorded.details)
    assert (details["code"], details["step"]) == ("query_invalid", "plan")
    with pytest.raises(TooManyRequestsError):
        preview_query(desk, ANN, query_ref="q-leak")


def test_a_preview_that_runs_keeps_the_servers_text(salaries_maria: MariaDBServer) -> None:
    """Without a marked table nothing is planned: the statement runs, on the record and
    rationed, and its error is the server's own."""
    desk = _desk(MySQLSource("maria", salaries_maria.url()), InMemoryAuditLog(), per_minute=5)
    desk.accounts.set_workspace_policy("acme", WorkspacePolicy())
    with pytest.raises(QueryInvalidError, match="XPATH syntax error"):
        preview_query(desk, ANN, query_ref="q-leak")
