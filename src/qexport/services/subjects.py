"""What is exported: a query or a report, one idea written once.

A request, a schedule, an approved request being queued, a schedule's run and the new-export
form each find the subject the same way (`readable_subject`: NotFoundError for one that is
missing or that the requester cannot read, every query of a report included), check a format
against it, bind parameter values to it and make its export record from it. Only the few
places where a query and a report truly differ branch on the kind, and they are here.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, Final

from qexport.domain.approvals import reads_fingerprint
from qexport.domain.commands import SubjectKind, SubjectRef
from qexport.domain.exports import Requester, safe_filename, storage_key
from qexport.domain.failures import InvalidRequestError, NotFoundError
from qexport.domain.formats import QUERY_FORMATS, REPORT_FORMATS, query_format
from qexport.domain.policies import WorkspacePolicy
from qexport.domain.queries import (
    Parameter,
    Query,
    bind_parameters,
    can_read,
    export_filename,
    to_json_value,
)
from qexport.domain.reports import SUBJECT_REPORT, Report, bind_report_parameters
from qexport.ports import Catalog, NewExport
from qexport.services.reports import find_readable_report, report_queries

SUBJECT_QUERY: Final = "query"
MAX_PARAMETERS = 64  # far more than any query declares; bounds the work a request can ask for
MAX_REF_CHARS = 200  # the longest query id or name worth a lookup
REPORT_FORMAT_NAMES: tuple[str, ...] = tuple(sorted(REPORT_FORMATS))


@dataclass(frozen=True)
class Subject:
    """A query or a report as a request sees it: its kind, id and name (a report's title),
    the parameters a request gives values for (a report's: those no section fixes), the
    formats it takes, and every query it reads (a query reads itself)."""

    kind: SubjectKind
    id: str
    name: str
    parameters: tuple[Parameter, ...]
    formats: tuple[str, ...]
    reads: tuple[Query, ...]
    report: Report | None = field(default=None, compare=False)

    @property
    def ref(self) -> str:
        """How a form names it: `query:ID` or `report:ID`."""
        return f"{self.kind}:{self.id}"

    @property
    def parameter_names(self) -> tuple[str, ...]:
        return tuple(p.name for p in self.parameters)

    def template_names(self, values: Mapping[str, Any]) -> tuple[str, ...]:
        """The names a file name template may use with these bound values: a query's every
        parameter (each bound has a value or a default), a report's given ones."""
        return self.parameter_names if self.report is None else tuple(values)

    def bind(self, parameters: Mapping[str, Any]) -> dict[str, Any]:
        """The given values typed and checked against the subject's parameters (defaults
        filled in); every problem at once, each named `parameters.<name>`."""
        if len(parameters) > MAX_PARAMETERS:
            raise InvalidRequestError(
                f"at most {MAX_PARAMETERS} parameters may be given", field="parameters"
            )
        try:
            if self.report is None:
                return bind_parameters(self.reads[0], dict(parameters))
            queries = {q.id: q for q in self.reads}
            return bind_report_parameters(self.report, queries, dict(parameters))
        except InvalidRequestError as exc:
            raise exc.within("parameters") from None

    def fingerprint(self) -> str:
        """What it reads now, as an approval records it (`reads_fingerprint`)."""
        return reads_fingerprint(self.reads, self.report)

    def sensitivity(self, policy: WorkspacePolicy) -> str | None:
        """Why the policy marks what it reads sensitive; None when it does not."""
        why = policy.sensitivity(self.reads)
        if why is None or self.report is None:
            return why
        return f"{why} (in the report {self.name!r})"

    def new_export(
        self,
        requester: Requester,
        fmt: str,
        values: Mapping[str, Any],
        *,
        neutralize_formulas: bool,
        now: datetime,
        filename_template: str | None = None,
    ) -> NewExport:
        """The record of an export of it with already bound values, its file named by
        `filename_template` (a schedule's) or else by the subject (a query's own template, a
        report's title)."""
        export_id = str(uuid.uuid4())
        return NewExport(
            id=export_id,
            workspace_id=requester.workspace_id,
            requested_by=requester.user_id,
            subject_type=self.kind,
            subject_id=self.id,
            subject_name=self.name,
            format=fmt,
            parameters={k: to_json_value(v) for k, v in values.items()},
            options={"neutralize_formulas": neutralize_formulas},
            filename=(filename := self._filename(fmt, values, now, filename_template)),
            storage_key=storage_key(requester.workspace_id, export_id, filename),
            created_at=now,
        )

    def _filename(
        self, fmt: str, values: Mapping[str, Any], now: datetime, template: str | None
    ) -> str:
        if self.report is None:
            template = template or self.reads[0].filename_template
            extension = query_format(fmt).extension
        elif template:
            extension = fmt
        else:
            return safe_filename(self.name, fmt)
        return export_filename(
            template, name=self.name, fmt=fmt, extension=extension, values=values, at=now
        )


def query_subject(query: Query) -> Subject:
    return Subject(SUBJECT_QUERY, query.id, query.name, query.parameters, QUERY_FORMATS, (query,))


def report_subject(report: Report, queries: Mapping[str, Query]) -> Subject:
    """A report with its queries (by id): its parameters are those no section fixes, in the
    order its sections first ask for them."""
    open_params: dict[str, Parameter] = {}
    for section in report.sections:
        query = queries.get(section.query_id)
        for param in () if query is None else query.parameters:
            if param.name not in section.parameters:
                open_params.setdefault(param.name, param)
    return Subject(
        "report",
        report.id,
        report.title,
        tuple(open_params.values()),
        REPORT_FORMAT_NAMES,
        tuple(queries.values()),
        report,
    )


def readable_subject(catalog: Catalog, requester: Requester, ref: SubjectRef) -> Subject:
    """The query or report `ref` names, if the requester may read it (a report: and every
    query in it); NotFoundError otherwise, whether it is missing or unreadable."""
    if ref.kind == SUBJECT_REPORT:
        report = find_readable_report(catalog, requester, ref.ref, match_title=ref.by_name)
        return report_subject(report, report_queries(catalog, requester, report))
    return query_subject(find_readable_query(catalog, requester, ref.ref, match_name=ref.by_name))


def find_readable_query(
    store: Catalog, requester: Requester, ref: str, *, match_name: bool = True
) -> Query:
    """A query by id (or, with `match_name`, by name) that the requester may read;
    NotFoundError otherwise, whether it is missing or unreadable."""
    query = store.get_query(ref) if len(ref) <= MAX_REF_CHARS else None
    if (query is None or query.deleted) and match_name and len(ref) <= MAX_REF_CHARS:
        query = store.find_query(requester.workspace_id, ref)
    if query is None or not can_read(requester, query):
        raise NotFoundError(f"no query {ref!r} that you can read")
    return query


def check_kind_format(kind: SubjectKind, fmt: str) -> None:
    """InvalidRequestError (field `format`) for a format that kind of subject does not take."""
    if kind == SUBJECT_REPORT:
        if fmt not in REPORT_FORMATS:
            raise InvalidRequestError(
                f"unknown report format {fmt!r}; valid formats: {', '.join(REPORT_FORMAT_NAMES)}",
                field="format",
            )
        return
    query_format(fmt)


def check_any_format(fmt: str) -> None:
    """A format some subject takes (when it is not yet known which)."""
    if fmt not in QUERY_FORMATS and fmt not in REPORT_FORMATS:
        names = ", ".join(dict.fromkeys((*QUERY_FORMATS, *REPORT_FORMAT_NAMES)))
        raise InvalidRequestError(
            f"unknown format {fmt[:20]!r}; valid formats: {names}", field="format"
        )


def check_allowed_format(policy: WorkspacePolicy | None, fmt: str) -> None:
    """Refuse a format the workspace's policy does not allow (naming the policy)."""
    refusal = None if policy is None else policy.format_refusal(fmt)
    if refusal is not None:
        raise InvalidRequestError(refusal, field="format")
