"""What a workspace lets leave: its export policy, set by its admins.

Every rule narrows what the installation allows, never widens it:

- `formats`: the only formats an export (or a schedule) may be made in; None: every one.
- `max_rows`: the most rows one export may hold, below QEXPORT_MAX_ROWS; a larger result
  fails `limit_exceeded` when it runs.
- `public_links`: whether members may create public links at all (existing ones stop
  working when this is turned off), and `link_max_days`, how long a new link lives (never
  past its file's expiry, which is the only bound without it).
- `retention_days`: files expire this many days after they are made, sooner than
  QEXPORT_RETENTION_DAYS.
- `recipient_domains`: the only email domains deliveries may be addressed to (a
  subdomain of one counts); None: any address.
- `sensitive_tables`: tables of the workspace's sources (all of a table, or some of its
  columns) whose data leaves only with an admin's approval: a query (or a report holding
  one) that reads any of them, as its source's planner reports it (domain/sensitivity.py),
  waits for an approval (domain/approvals.py), is not previewed and no schedule may export
  it. A query's SQL copied into a new query reads the same tables: it is just as sensitive.
- `sensitive_queries`: the ids of queries treated so whatever they read (a shortcut).

A policy is stored as JSON with only the rules that are set.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from typing import Any

from qexport.domain.failures import InvalidRequestError, Problems
from qexport.domain.queries import Query
from qexport.domain.sensitivity import (
    FileReads,
    ReadsReporting,
    Relation,
    SensitiveTable,
    table_rules,
)

MAX_DOMAINS = 50
MAX_DAYS = 36_500  # a hundred years: past that a limit is no limit
_DOMAIN = re.compile(
    r"^(?=.{1,253}$)[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?(?:\.[a-z0-9](?:[a-z0-9-]{0,61}[a-z0-9])?)+$"
)
RULES = (
    "formats",
    "max_rows",
    "public_links",
    "link_max_days",
    "retention_days",
    "recipient_domains",
    "sensitive_tables",
    "sensitive_queries",
)
MAX_SENSITIVE = 500


@dataclass(frozen=True)
class WorkspacePolicy:
    formats: frozenset[str] | None = None
    max_rows: int | None = None
    public_links: bool = True
    link_max_days: int | None = None
    retention_days: int | None = None
    recipient_domains: tuple[str, ...] | None = None
    sensitive_tables: tuple[SensitiveTable, ...] = ()
    sensitive_queries: frozenset[str] = frozenset()

    # ------------------------------------------------------------ what it allows

    def format_refusal(self, fmt: str) -> str | None:
        """Why `fmt` may not be exported here, or None."""
        if self.formats is None or fmt in self.formats:
            return None
        allowed = ", ".join(sorted(self.formats))
        return f"the workspace's policy does not allow {fmt} exports (allowed: {allowed})"

    def row_limit(self, installation: int) -> int:
        """The most rows an export may hold: the installation's limit or the policy's."""
        return installation if self.max_rows is None else min(self.max_rows, installation)

    def retention(self, installation: timedelta) -> timedelta:
        """How long a file is kept: the installation's retention or the policy's."""
        if self.retention_days is None:
            return installation
        return min(timedelta(days=self.retention_days), installation)

    def link_expiry(self, now: datetime, file_expiry: datetime) -> datetime:
        """When a link created `now` stops working: with its file, or sooner by policy."""
        if self.link_max_days is None:
            return file_expiry
        return min(file_expiry, now + timedelta(days=self.link_max_days))

    def allows_address(self, address: str) -> bool:
        """Whether a delivery may be addressed to the email `address`."""
        if self.recipient_domains is None:
            return True
        domain = address.rpartition("@")[2].lower().rstrip(".")
        return any(domain == d or domain.endswith(f".{d}") for d in self.recipient_domains)

    def address_refusal(self, address: str) -> str | None:
        if self.allows_address(address):
            return None
        domains = ", ".join(self.recipient_domains or ())
        given = address.rpartition("@")[2].lower()[:80]
        return (
            f"the workspace's policy only allows email recipients at {domains} ({given} is not one)"
        )

    def needs_approval(self, queries: Iterable[Query | None]) -> bool:
        """Whether an export reading these queries waits for an admin's approval."""
        return self.sensitivity(queries) is not None

    def sensitivity(self, queries: Iterable[Query | None]) -> str | None:
        """Why an export reading these queries waits for an admin's approval, as people read
        it ("the query 'x' reads shop: main.customers (email), which ..."); None if it does
        not. Each query is judged by what it reads as recorded (`Query.reads`: None when
        its source cannot say, or for a query saved before reads were recorded, which then
        reads every sensitive table of its source), and by its id."""
        for query in queries:
            if query is None:
                continue
            marked = self.marked_query([query])
            if marked is not None:
                return marked
            hit = self.table_hit(query.source, query.reads)
            if hit is None:
                continue
            if query.reads is None:
                return (
                    f"the source {query.source!r} cannot say which tables the query"
                    f" {query.name!r} reads, and the workspace's policy marks tables of it"
                    f" sensitive ({hit.words()})"
                )
            return (
                f"the query {query.name!r} reads {hit.words()}, which the workspace's policy"
                " marks sensitive"
            )
        return None

    def marked_query(self, queries: Iterable[Query | None]) -> str | None:
        """Why these queries wait for an approval by their ids alone (`sensitive_queries`),
        whatever they read; None if none is marked."""
        for query in queries:
            if query is not None and query.id in self.sensitive_queries:
                return f"the workspace's policy marks the query {query.name!r} sensitive"
        return None

    def file_sensitivity(self, reads: FileReads | None) -> str | None:
        """Why a file made from `reads` (what its run read, as recorded with it) holds what
        the policy's sensitive tables mark; None if it does not. A file whose reads are not
        on record (made before they were recorded) counts as reading every marked table, and
        a source that could not say as reading every marked table of it (fail closed)."""
        if not self.sensitive_tables:
            return None
        if reads is None:
            first = self.sensitive_tables[0].words()
            return (
                "what the file was made from is not on record, so it counts as reading every"
                f" table the workspace's policy marks sensitive ({first})"
            )
        for source, relations in sorted(reads.items()):
            hit = self.table_hit(source, relations)
            if hit is None:
                continue
            if relations is None:
                return (
                    f"the source {source!r} could not say which tables the file was made"
                    f" from, and the workspace's policy marks tables of it sensitive"
                    f" ({hit.words()})"
                )
            return (
                f"the file was made from {hit.words()}, which the workspace's policy marks"
                " sensitive"
            )
        return None

    def table_hit(self, source: str, reads: frozenset[Relation] | None) -> SensitiveTable | None:
        """The first sensitive table a statement on `source` reading `reads` reads."""
        return next((t for t in self.sensitive_tables if t.hit_by(source, reads)), None)

    def marks_tables_of(self, source: str) -> bool:
        """Whether any table of `source` is sensitive (its queries are then planned)."""
        return any(t.covers(source) for t in self.sensitive_tables)

    # ------------------------------------------------------------ stored form

    def to_json(self) -> dict[str, Any]:
        """The rules that are set, for storage and for the API."""
        stored: dict[str, Any] = {}
        if self.formats is not None:
            stored["formats"] = sorted(self.formats)
        if self.max_rows is not None:
            stored["max_rows"] = self.max_rows
        if not self.public_links:
            stored["public_links"] = False
        if self.link_max_days is not None:
            stored["link_max_days"] = self.link_max_days
        if self.retention_days is not None:
            stored["retention_days"] = self.retention_days
        if self.recipient_domains is not None:
            stored["recipient_domains"] = list(self.recipient_domains)
        if self.sensitive_tables:
            stored["sensitive_tables"] = [t.to_json() for t in self.sensitive_tables]
        if self.sensitive_queries:
            stored["sensitive_queries"] = sorted(self.sensitive_queries)
        return stored

    @classmethod
    def from_json(cls, stored: Mapping[str, Any] | None) -> WorkspacePolicy:
        """The policy stored by `to_json` (None: no rules)."""
        if not stored:
            return cls()
        formats = stored.get("formats")
        domains = stored.get("recipient_domains")
        return cls(
            formats=None if formats is None else frozenset(str(f) for f in formats),
            max_rows=_int_or_none(stored.get("max_rows")),
            public_links=bool(stored.get("public_links", True)),
            link_max_days=_int_or_none(stored.get("link_max_days")),
            retention_days=_int_or_none(stored.get("retention_days")),
            recipient_domains=None if domains is None else tuple(str(d) for d in domains),
            sensitive_tables=tuple(
                SensitiveTable.from_json(t) for t in stored.get("sensitive_tables") or ()
            ),
            sensitive_queries=frozenset(str(q) for q in stored.get("sensitive_queries") or ()),
        )

    def describe(self) -> list[str]:
        """One line per rule, as people read them."""
        return [
            "formats: " + ("any" if self.formats is None else ", ".join(sorted(self.formats))),
            "max rows: "
            + ("the installation's" if self.max_rows is None else f"{self.max_rows:,}"),
            "public links: " + ("allowed" if self.public_links else "off"),
            "link lifetime: "
            + (
                "the file's" if self.link_max_days is None else f"at most {self.link_max_days} days"
            ),
            "retention: "
            + (
                "the installation's"
                if self.retention_days is None
                else f"{self.retention_days} days"
            ),
            "email recipients: "
            + (
                "any domain"
                if self.recipient_domains is None
                else ", ".join(self.recipient_domains)
            ),
            "sensitive tables: "
            + (
                "; ".join(
                    t.words() + (f" (also through {', '.join(sorted(t.also))})" if t.also else "")
                    for t in self.sensitive_tables
                )
                + ", read only with an admin's approval"
                if self.sensitive_tables
                else "none"
            ),
            "sensitive queries: "
            + (
                f"{len(self.sensitive_queries)}, exported with an admin's approval"
                if self.sensitive_queries
                else "none"
            ),
        ]


def _int_or_none(value: Any) -> int | None:
    return None if value is None else int(value)


@dataclass(frozen=True)
class PolicyLimits:
    """What the installation allows, which a policy may only narrow."""

    formats: frozenset[str]
    max_rows: int
    retention_days: int
    # The workspace's sources, and what each one's planner reports (sensitive_tables).
    sources: Mapping[str, ReadsReporting] = field(default_factory=dict)


def changed_policy(
    current: WorkspacePolicy, changes: Mapping[str, Any], limits: PolicyLimits
) -> WorkspacePolicy:
    """`current` with `changes` applied (a rule given as None is lifted); every mistake
    refused at once, each naming its rule (InvalidRequestError)."""
    problems = Problems()
    unknown = sorted(set(changes) - set(RULES))
    for name in unknown:
        problems.add(
            InvalidRequestError(f"no policy rule {name!r} (rules: {', '.join(RULES)})", field=name)
        )
    updates: dict[str, Any] = {}
    for name in RULES:
        if name not in changes:
            continue
        with problems.check():
            updates[name] = _checked(name, changes[name], limits)
    problems.raise_any()
    return replace(current, **updates)


def _checked(name: str, value: Any, limits: PolicyLimits) -> Any:  # noqa: PLR0911 - per rule
    if name == "sensitive_queries":
        return _query_ids(value)
    if name == "sensitive_tables":
        return table_rules(value, limits.sources)
    if name == "public_links":
        if value is None:
            return True
        if not isinstance(value, bool):
            raise InvalidRequestError("public_links is true or false", field=name)
        return value
    if value is None:
        return None
    if name == "formats":
        return _formats(value, limits.formats)
    if name == "recipient_domains":
        return _domains(value)
    if name == "max_rows":
        return _count(name, value, limits.max_rows, "the installation's row limit")
    if name == "retention_days":
        return _count(name, value, limits.retention_days, "the installation's retention")
    return _count(name, value, MAX_DAYS, "a hundred years")


def _count(name: str, value: Any, most: int, what: str) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidRequestError(f"{name} is a whole number of at least 1", field=name)
    if value > most:
        raise InvalidRequestError(
            f"{name} may not exceed {what} ({most:,}): a policy only narrows it", field=name
        )
    return value


def _formats(value: Any, known: frozenset[str]) -> frozenset[str]:
    if not isinstance(value, list | tuple) or not value:
        raise InvalidRequestError(
            "formats is a non-empty list of format names (null allows every one)",
            field="formats",
        )
    wrong = [str(v)[:40] for v in value if not isinstance(v, str) or v not in known]
    if wrong:
        raise InvalidRequestError(
            f"unknown format {wrong[0]!r} (known: {', '.join(sorted(known))})", field="formats"
        )
    return frozenset(value)


def _domains(value: Any) -> tuple[str, ...]:
    if not isinstance(value, list | tuple) or not value:
        raise InvalidRequestError(
            "recipient_domains is a non-empty list of domains (null allows any)",
            field="recipient_domains",
        )
    if len(value) > MAX_DOMAINS:
        raise InvalidRequestError(
            f"at most {MAX_DOMAINS} recipient domains", field="recipient_domains"
        )
    found: dict[str, None] = {}
    for index, item in enumerate(value):
        domain = item.strip().lower().rstrip(".").removeprefix("@") if isinstance(item, str) else ""
        if not _DOMAIN.match(domain):
            raise InvalidRequestError(
                f"{str(item)[:80]!r} is not an email domain (e.g. example.com)",
                field=f"recipient_domains[{index}]",
            )
        found[domain] = None
    return tuple(found)


def _query_ids(value: Any) -> frozenset[str]:
    """Query ids (whether each exists in the workspace is the service's to check)."""
    if value is None:
        return frozenset()
    if not isinstance(value, list | tuple):
        raise InvalidRequestError(
            "sensitive_queries is a list of query ids ([] or null: none)",
            field="sensitive_queries",
        )
    if len(value) > MAX_SENSITIVE:
        raise InvalidRequestError(
            f"at most {MAX_SENSITIVE} sensitive queries", field="sensitive_queries"
        )
    for index, item in enumerate(value):
        if not isinstance(item, str) or not item.strip() or len(item) > 200:
            raise InvalidRequestError(
                "a query id is a non-empty string", field=f"sensitive_queries[{index}]"
            )
    return frozenset(item.strip() for item in value)


def every_format(*groups: Iterable[str]) -> frozenset[str]:
    return frozenset(f for group in groups for f in group)
