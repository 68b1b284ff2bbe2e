"""`GET /metrics`: Prometheus text, computed from the metadata database at each scrape.

Every API and worker process shares that database, so whichever process is scraped reports
the whole system, and a restart loses nothing. Like `/healthz` it needs no token: it shows
counts, and workspace ids as the labels of the download figures, never people, file names or
other names; where that matters, protect it at the proxy.

The download figures (downloads, bytes sent and public-link uses by workspace) and the
preview figures (previews and the rows they showed) are sums over the audit trail: they
cover what it keeps (QEXPORT_AUDIT_RETENTION days), so `qexport audit prune` lowers them,
which Prometheus takes for a counter reset (`rate()` and `increase()` stay right; a total
over all time does not). The one figure not read from the database is
`qexport_audit_record_failures_total`: the events this process could not record (so none of
them is in the database), counted since it started.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from fastapi import APIRouter, Response
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from prometheus_client.core import (
    CounterMetricFamily,
    GaugeHistogramMetricFamily,
    GaugeMetricFamily,
    Metric,
)
from prometheus_client.registry import Collector

from qexport.api.auth import Context
from qexport.domain.failures import FailureCode
from qexport.domain.stats import (
    ATTEMPT_ENDS,
    ATTEMPT_EVENTS_LIMIT,
    ATTEMPT_WINDOW,
    DURATION_BUCKETS,
    DownloadTally,
    Durations,
    ExportStats,
)
from qexport.http.errors import PROBLEM
from qexport.http.one_hop import OneHopRoute

router = APIRouter(route_class=OneHopRoute)

_WINDOW_HOURS = int(ATTEMPT_WINDOW.total_seconds() // 3600)


class ExportStatsCollector(Collector):
    """A Collector over the figures of one scrape (read before, so that a database outage is
    a 503 and not a truncated page)."""

    def __init__(self, stats: ExportStats, oldest_age_seconds: float, audit_failures: int) -> None:
        self.stats = stats
        self.oldest_age_seconds = oldest_age_seconds
        self.audit_failures = audit_failures

    def collect(self) -> Iterator[Metric]:
        s = self.stats
        exports = GaugeMetricFamily(
            "qexport_exports",
            "Exports by status; expired = succeeded and past its expiry.",
            labels=["status"],
        )
        for status, count in s.by_status.items():
            exports.add_metric([status], count)
        yield exports

        failures = CounterMetricFamily(
            "qexport_export_failures", "Failed exports by failure code.", labels=["code"]
        )
        for code in FailureCode:
            failures.add_metric([code.value], s.failures.get(code.value, 0))
        yield failures

        yield CounterMetricFamily(
            "qexport_rows_written",
            "Rows written by succeeded exports (expired ones included).",
            value=s.rows_written,
        )
        yield CounterMetricFamily(
            "qexport_bytes_written",
            "Bytes stored by succeeded exports (expired ones included).",
            value=s.bytes_written,
        )
        yield self._durations()
        yield GaugeMetricFamily(
            "qexport_queue_depth",
            "Exports a worker could claim now: queued, or running with an expired lease.",
            value=s.queue_depth,
        )
        yield GaugeMetricFamily(
            "qexport_oldest_queued_age_seconds",
            "Age of the oldest export still queued; 0 when none is.",
            value=self.oldest_age_seconds,
        )
        yield from self._downloads()
        yield from self._previews()
        pending = GaugeMetricFamily(
            "qexport_approvals_pending",
            "Export requests of sensitive queries waiting for an admin's approval (not yet"
            " expired), by workspace.",
            labels=["workspace"],
        )
        for workspace_id, count in sorted(s.approvals_pending.items()):
            pending.add_metric([workspace_id], count)
        yield pending
        yield CounterMetricFamily(
            "qexport_audit_record_failures",
            "Audit events (downloads, sign-ins) this process could not record since it"
            " started: per process, not read from the database.",
            value=self.audit_failures,
        )

    def _downloads(self) -> Iterator[Metric]:
        kept = (
            " Over the audit events kept (QEXPORT_AUDIT_RETENTION): a prune lowers it, a"
            " counter reset."
        )
        figures: tuple[tuple[str, str, Callable[[DownloadTally], int]], ...] = (
            (
                "qexport_downloads",
                "Files downloaded by workspace: each file or range sent (200, 206) and each"
                " presigned S3 URL handed out; not refusals, not 304s." + kept,
                lambda t: t.downloads,
            ),
            (
                "qexport_downloaded_bytes",
                "Bytes of the files and ranges sent by workspace (each response's"
                " Content-Length, a transfer cut short included); presigned S3 downloads add"
                " none, their bytes go from S3 unseen." + kept,
                lambda t: t.bytes_sent,
            ),
            (
                "qexport_public_link_uses",
                "Downloads through a public link by workspace (presigned ones included)." + kept,
                lambda t: t.public_link_uses,
            ),
        )
        by_workspace = sorted(self.stats.downloads.items())
        for name, help_text, figure in figures:
            family = CounterMetricFamily(name, help_text, labels=["workspace"])
            for workspace_id, tally in by_workspace:
                family.add_metric([workspace_id], figure(tally))
            yield family

    def _previews(self) -> Iterator[Metric]:
        kept = (
            " Over the audit events kept (QEXPORT_AUDIT_RETENTION): a prune lowers it, a"
            " counter reset."
        )
        previews = CounterMetricFamily(
            "qexport_previews",
            "Previews that showed rows (API, pages and CLI) by workspace; not refusals nor"
            " failures." + kept,
            labels=["workspace"],
        )
        rows = CounterMetricFamily(
            "qexport_previewed_rows",
            "Rows shown by previews by workspace." + kept,
            labels=["workspace"],
        )
        for workspace_id, tally in sorted(self.stats.previews.items()):
            previews.add_metric([workspace_id], tally.previews)
            rows.add_metric([workspace_id], tally.rows)
        yield previews
        yield rows

    def _durations(self) -> Metric:
        family = GaugeHistogramMetricFamily(
            "qexport_attempt_duration_seconds",
            "Duration of worker attempts, from claim or redelivery to the attempt's success,"
            " failure, release for a retry or cancellation (outcome), over attempts started in"
            f" the last {_WINDOW_HOURS} h among the last {ATTEMPT_EVENTS_LIMIT} export events;"
            " a window, so the buckets can go down.",
            labels=["outcome"],
        )
        none = Durations(tuple((bound, 0) for bound in DURATION_BUCKETS), 0, 0.0)
        for outcome in ATTEMPT_ENDS:
            found = self.stats.attempts.get(outcome, none)
            buckets = [(repr(float(bound)), count) for bound, count in found.buckets]
            family.add_metric([outcome], [*buckets, ("+Inf", found.count)], found.sum_seconds)
        return family


@router.get(
    "/metrics",
    summary="Prometheus metrics, computed from the metadata database (no token needed)",
    response_class=Response,
    responses={
        200: {
            "description": "The Prometheus text exposition format.",
            "content": {"text/plain": {"schema": {"type": "string"}}},
        },
        503: {
            "description": "The metadata database is unavailable.",
            "content": {PROBLEM: {"schema": {"type": "object"}}},
        },
    },
)
def metrics(context: Context) -> Response:
    now = context.clock.now()
    stats = context.stats(now)
    age = (now - stats.oldest_queued_at).total_seconds() if stats.oldest_queued_at else 0.0
    registry = CollectorRegistry(auto_describe=False)
    registry.register(ExportStatsCollector(stats, max(age, 0.0), context.audit.failures))
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)
