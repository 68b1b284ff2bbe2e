"""A policy's sensitive tables, checked on their sources when the policy changes, and kept
over every source of the workspace that reaches the same data.

Checked on the source (domain/rule_check.py): a rule that names a view, a missing table or
column, or a generated column DuckDB reports as its inputs would never match what a planner
reports, and would protect nothing without a word. Each new or changed rule is looked up in
its source's catalogue, through a preview process (`PreviewRunner.catalogue`: DuckDB opens
its file to answer, which the server's own process must not hold), with the source's own
login and no member's context. The source must answer: a rule on a source that cannot be
reached is refused with 503 (the policy is left as it was), since it could not be checked.
A rule left as it was is not looked up again. A source that cannot say (generic, Spark) is
not checked: every query on it already reads, for the policy, every marked table of it.

The same data: a second source over the database a rule's source reaches (another name,
another login; `pg2` registered on `pg`'s URL) would read the marked tables with no approval,
since rules name sources. So each source says the identity of the data it reaches
(`Catalogue.identity`: a PostgreSQL cluster's system identifier and database name, a MySQL
server's UUID or address and database, a DuckDB file's real path), the rule keeps its
source's, and `also` names every other source of the workspace with the same identity: the
rule holds for statements on those too (`SensitiveTable.covers`). Kept up to date when the
policy changes (every source of the workspace is asked; one that does not answer is left out
and logged) and when a source is registered in, or shared with, a workspace whose rules name
a source of the same identity (`cover_new_source`), which is an audited change of that
policy. Alternatives weighed: matching by identity at judgement time would need every
source's identity on every request and preview, which are judged without asking a source;
refusing to register the second source would stop a legitimate second login (another
role's row-level security) over the same database.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from typing import Any

import structlog

from qexport.domain.audit import Action, Actor
from qexport.domain.failures import (
    InvalidRequestError,
    Problems,
    QExportError,
    SourceUnavailableError,
)
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.rule_check import Catalogue, rule_problems
from qexport.domain.sensitivity import ReadsReporting, SensitiveTable, table_rule
from qexport.ports import CatalogueJob, Clock, PreviewRunner, SourceCatalog, WorkspaceStore
from qexport.services.audit import event

log = structlog.get_logger()


def checked_rules(
    before: WorkspacePolicy,
    policy: WorkspacePolicy,
    entries: Sequence[Any],
    reporting: Mapping[str, ReadsReporting],
    *,
    runner: PreviewRunner,
    sources: SourceCatalog,
    workspace_id: str,
    timeout_seconds: float,
) -> WorkspacePolicy:
    """`policy` (its `sensitive_tables` as written in `entries`, already read by
    `table_rules`) with each new or changed rule checked on its source, and every rule's
    identity and `also` set. SourceUnavailableError (503) naming the sources that could not
    be asked; InvalidRequestError with every rule that can never match, each on its entry
    (`sensitive_tables[i].table` or `.columns`)."""
    kept = {rule.key for rule in before.sensitive_tables}
    written = [(index, table_rule(index, value, reporting)) for index, value in enumerate(entries)]
    to_check = [(index, rule) for index, rule in written if rule.key not in kept]
    by_source: dict[str, list[tuple[int, SensitiveTable]]] = {}
    for index, rule in to_check:
        by_source.setdefault(rule.source, []).append((index, rule))
    catalogues: dict[str, Catalogue | None] = {}
    unreachable: list[str] = []
    for source, rules in sorted(by_source.items()):
        names = tuple(dict.fromkeys((rule.schema, rule.table) for _, rule in rules))
        try:
            catalogues[source] = runner.catalogue(
                CatalogueJob(source, workspace_id, names, timeout_seconds)
            )
        except QExportError as exc:
            log.warning("rule_source_unreachable", source=source, reason=str(exc))
            unreachable.append(f"{source!r} ({exc})")
    if unreachable:
        raise SourceUnavailableError(
            f"the rules naming the source {', '.join(unreachable)} could not be checked on it:"
            " the policy was not changed; try again once the source answers"
        )
    problems = Problems()
    for index, rule in to_check:
        catalogue = catalogues.get(rule.source)
        found = catalogue.found(rule.schema, rule.table) if catalogue is not None else None
        if catalogue is None or found is None:
            continue  # the source cannot say: nothing to check against
        case_sensitive = reporting[rule.source].case_sensitive
        for problem in rule_problems(rule, found, case_sensitive=case_sensitive):
            field = f"sensitive_tables[{index}].{problem.part}"
            problems.add(InvalidRequestError(problem.message, field=field))
    problems.raise_any()
    identities = _identities(runner, sources, workspace_id, catalogues, timeout_seconds)
    stored = {rule.source: rule.identity for rule in before.sensitive_tables if rule.identity}
    return replace(
        policy,
        sensitive_tables=tuple(
            _covering(rule, identities.get(rule.source) or stored.get(rule.source), identities)
            for rule in policy.sensitive_tables
        ),
    )


def _identities(
    runner: PreviewRunner,
    sources: SourceCatalog,
    workspace_id: str,
    asked: Mapping[str, Catalogue | None],
    timeout_seconds: float,
) -> dict[str, str]:
    """The identity of the data each source of the workspace reaches, as it says (those
    already asked, then the others); a source that does not answer is left out."""
    found = {name: c.identity for name, c in asked.items() if c is not None and c.identity}
    for name in sources.names_for(workspace_id):
        if name in asked:
            continue
        try:
            catalogue = runner.catalogue(CatalogueJob(name, workspace_id, (), timeout_seconds))
        except QExportError as exc:
            log.warning("source_identity_unknown", source=name, reason=str(exc))
            continue
        if catalogue is not None and catalogue.identity:
            found[name] = catalogue.identity
    return found


def _covering(
    rule: SensitiveTable, identity: str | None, identities: Mapping[str, str]
) -> SensitiveTable:
    """The rule with its source's identity and the other sources over the same data."""
    if identity is None:
        return replace(rule, identity=None, also=frozenset())
    also = frozenset(n for n, i in identities.items() if i == identity and n != rule.source)
    return replace(rule, identity=identity, also=also)


def cover_new_source(
    accounts: WorkspaceStore,
    clock: Clock,
    actor: Actor,
    name: str,
    identity: str | None,
    workspaces: Iterable[str],
) -> list[str]:
    """Extend, in each of `workspaces` that may now use the source `name` (registered or
    shared), the rules whose source reaches the same data (`identity`) to cover it too: a
    change of each such policy, audited as the actor's. The workspaces whose policy changed."""
    if identity is None:
        return []
    changed: list[str] = []
    for workspace_id in sorted(set(workspaces)):
        before = accounts.workspace_policy(workspace_id)
        rules = tuple(
            replace(rule, also=rule.also | {name})
            if rule.identity == identity and not rule.covers(name)
            else rule
            for rule in before.sensitive_tables
        )
        if rules == before.sensitive_tables:
            continue
        after = replace(before, sensitive_tables=rules)
        audit = event(
            clock,
            actor,
            Action.POLICY_CHANGED,
            workspace_id=workspace_id,
            target=("workspace", workspace_id),
            details={
                "before": before.to_json(),
                "after": after.to_json(),
                "reason": f"the source {name!r} reaches the same data as a marked table's",
            },
        )
        if accounts.set_workspace_policy(workspace_id, after, audit=audit, now=clock.now()):
            log.info("rules_cover_source", workspace=workspace_id, source=name)
            changed.append(workspace_id)
    return changed
