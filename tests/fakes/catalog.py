"""The catalog (saved queries and reports) in memory, guarded by one lock."""

from __future__ import annotations

import threading
from dataclasses import replace

from qexport.domain.audit import AuditEvent
from qexport.domain.failures import InvalidRequestError
from qexport.domain.queries import Query
from qexport.domain.reports import Report
from qexport.domain.sensitivity import Relation
from tests.fakes.audit import InMemoryAuditLog


class InMemoryCatalog:
    """The Catalog contract on two dicts."""

    def __init__(self) -> None:
        self._queries: dict[str, Query] = {}
        self._reports: dict[str, Report] = {}
        self._catalog_lock = threading.Lock()
        self.audit_log = InMemoryAuditLog()  # the container's, when it builds one

    # saved queries
    def _add_query_unaudited(self, query: Query) -> Query:
        with self._catalog_lock:
            if self._live_query(query.workspace_id, query.name) is not None:
                raise InvalidRequestError(
                    f"a query named {query.name!r} already exists", field="name"
                )
            self._queries[query.id] = query
        return query

    def _live_query(self, workspace_id: str, name: str) -> Query | None:
        for query in self._queries.values():
            if query.workspace_id == workspace_id and query.name == name and not query.deleted:
                return query
        return None

    def get_query(self, query_id: str) -> Query | None:
        with self._catalog_lock:
            return self._queries.get(query_id)

    def find_query(self, workspace_id: str, name: str) -> Query | None:
        with self._catalog_lock:
            return self._live_query(workspace_id, name)

    def list_queries(self, workspace_id: str) -> list[Query]:
        with self._catalog_lock:
            live = [
                q
                for q in self._queries.values()
                if q.workspace_id == workspace_id and not q.deleted
            ]
        return sorted(live, key=lambda q: q.name)

    def _update_query_unaudited(self, query: Query) -> bool:
        with self._catalog_lock:
            current = self._queries.get(query.id)
            if current is None or current.deleted:
                return False
            self._queries[query.id] = replace(query, workspace_id=current.workspace_id)
            return True

    def record_reads(
        self, query_id: str, *, sql: str, source: str, reads: frozenset[Relation] | None
    ) -> bool:
        with self._catalog_lock:
            current = self._queries.get(query_id)
            if current is None or current.deleted or (current.sql, current.source) != (sql, source):
                return False
            self._queries[query_id] = replace(current, reads=reads)
            return True

    def _delete_query_unaudited(self, query_id: str) -> bool:
        with self._catalog_lock:
            current = self._queries.get(query_id)
            if current is None or current.deleted:
                return False
            self._queries[query_id] = replace(current, deleted=True)
            return True

    # reports
    def _add_report_unaudited(self, report: Report) -> Report:
        with self._catalog_lock:
            if report.id in self._reports:
                raise ValueError("duplicate report id")
            self._reports[report.id] = report
        return report

    def get_report(self, report_id: str) -> Report | None:
        with self._catalog_lock:
            return self._reports.get(report_id)

    def list_reports(self, workspace_id: str) -> list[Report]:
        with self._catalog_lock:
            live = [
                r
                for r in self._reports.values()
                if r.workspace_id == workspace_id and not r.deleted
            ]
        return sorted(live, key=lambda r: (r.title, r.id))

    def _update_report_unaudited(self, report: Report) -> bool:
        with self._catalog_lock:
            current = self._reports.get(report.id)
            if current is None or current.deleted:
                return False
            self._reports[report.id] = replace(report, workspace_id=current.workspace_id)
            return True

    def _delete_report_unaudited(self, report_id: str) -> bool:
        with self._catalog_lock:
            current = self._reports.get(report_id)
            if current is None or current.deleted:
                return False
            self._reports[report_id] = replace(current, deleted=True)
            return True

    # the audited writes: each appends its `audit` event when the change is made
    def add_query(self, query: Query, *, audit: AuditEvent | None = None) -> Query:
        done = self._add_query_unaudited(query)
        self.audit_log.append(audit)
        return done

    def update_query(self, query: Query, *, audit: AuditEvent | None = None) -> bool:
        done = self._update_query_unaudited(query)
        if done:
            self.audit_log.append(audit)
        return done

    def delete_query(self, query_id: str, *, audit: AuditEvent | None = None) -> bool:
        done = self._delete_query_unaudited(query_id)
        if done:
            self.audit_log.append(audit)
        return done

    def add_report(self, report: Report, *, audit: AuditEvent | None = None) -> Report:
        done = self._add_report_unaudited(report)
        self.audit_log.append(audit)
        return done

    def update_report(self, report: Report, *, audit: AuditEvent | None = None) -> bool:
        done = self._update_report_unaudited(report)
        if done:
            self.audit_log.append(audit)
        return done

    def delete_report(self, report_id: str, *, audit: AuditEvent | None = None) -> bool:
        done = self._delete_report_unaudited(report_id)
        if done:
            self.audit_log.append(audit)
        return done
