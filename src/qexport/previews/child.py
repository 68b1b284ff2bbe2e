"""A preview process: it runs the previews it is sent, one at a time, within its memory limit.

Started by processes.py (forked from the forkserver, or from the CLI), it first makes sure it
cannot outlive the process that asked nor take its memory:

- it ends with its parent (Linux's parent-death signal, SIGKILL), and leaves the terminal's
  Ctrl-C to the server, which stops it itself;
- its data (RLIMIT_DATA: every writable private mapping, heap and mmap alike, thread stacks
  included) may grow by QEXPORT_PREVIEW_MAX_MEMORY past its size when it started, which the
  forkserver's imports set (200 MiB here);
- Arrow allocates through the system allocator rather than mimalloc, which reserves 1 GiB of
  data in one go on its first allocation (preload.py does the same in the forkserver);
- each DuckDB database it opens runs PREVIEW_THREADS threads, not one per core: DuckDB starts
  them (and a few of its own) as a database opens, 8 MiB of stack each against the limit.

Then, for each job: the source by name (the workspace's right to it checked again), its
`preview`, and the cells a page shows (writers/cells.py), so that what crosses back is
bounded too; or its `catalogue`, for the rules of a policy being changed; or its
`describe`, for a query being saved (DuckDB folds constants as it plans:
describing `SELECT length(repeat('x', 1000000000))` took 7 s and 2 GiB in the server). A
statement that meets the limit fails inside the source (DuckDB raises its out-of-memory
error when an allocation is refused; Python, MemoryError) and the answer is
`limit_exceeded` naming the limit; the process asks to be replaced, as what it still holds
is suspect, and so does one grown past half its budget. A process killed outright (by the
kernel, or for overrunning its time) is noticed by the parent.
"""

from __future__ import annotations

import ctypes
import logging
import os
import resource
import signal
import sys
from collections.abc import Callable
from dataclasses import replace
from multiprocessing.connection import Connection
from pathlib import Path

import pyarrow as pa
import structlog

from qexport.config import Settings
from qexport.domain.failures import (
    LimitExceededError,
    MemoryRefusedError,
    QExportError,
    SourceOutOfMemoryError,
)
from qexport.logs import configure_logging
from qexport.ports import (
    CatalogueJob,
    DescribeJob,
    PlanJob,
    PreviewCells,
    PreviewJob,
    Source,
    SourceCatalog,
)
from qexport.previews.wire import Answer, Refusal
from qexport.sources.duckdb.source import limit_threads
from qexport.writers.cells import preview_cells

log = structlog.get_logger()

PREVIEW_THREADS = 4
_PR_SET_PDEATHSIG = 1  # linux/prctl.h
_MIB = 1024**2

# What a preview process opens its sources with: the catalogue, and what closes them.
OpenSources = Callable[[Settings], tuple[SourceCatalog, Callable[[], None]]]


def serve(
    conn: Connection,
    settings: Settings,
    open_sources: OpenSources,
    *,
    parent_end: Connection | None = None,
    log_level: int = logging.WARNING,
) -> None:
    """Answer the jobs `conn` brings until it closes (the parent gives the process up, or
    stops); the sources are closed on the way out, their scratch folders removed.
    `parent_end`: the other end, inherited by a fork, closed here. `log_level`: what it logs
    (the CLI's refusals are one line: it logs errors only)."""
    _end_with_parent(os.getppid())
    if parent_end is not None:
        parent_end.close()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    configure_logging(level=log_level)
    pa.set_memory_pool(pa.system_memory_pool())
    limit_threads(PREVIEW_THREADS)
    budget = settings.preview_max_memory
    start = _limit_data(budget)
    sources, close = open_sources(settings)
    try:
        while True:
            try:
                job = conn.recv()
            except EOFError:
                return
            found = answer(sources, job, budget)
            # Allocators keep what they were given (DuckDB's jemalloc, in 64-128 MiB extents):
            # a process grown past half its budget leaves the next preview too little room.
            grown = (data_size() or 0) - start
            conn.send(replace(found, retire=found.retire or grown > budget // 2))
    finally:
        close()


Job = PreviewJob | DescribeJob | PlanJob | CatalogueJob


def answer(sources: SourceCatalog, job: Job, budget: int) -> Answer:
    """One job's answer: its cells (a describe's columns, a plan's reads, a catalogue's
    tables), or the refusal it ended with."""
    try:
        if isinstance(job, CatalogueJob):
            return _catalogued(sources, job)
        return _answered(sources.source_for(job.source, job.requester.workspace_id), job)
    except Exception as exc:
        if _out_of_memory(exc):
            log.warning("preview_out_of_memory", source=job.source, budget_mib=budget // _MIB)
            return Answer(refusal=Refusal.of(out_of_memory(budget)), retire=True)
        if isinstance(exc, QExportError):
            return Answer(refusal=Refusal.of(exc))
        log.exception("preview_failed_unexpectedly", source=job.source)
        return Answer(refusal=Refusal.of(QExportError("the preview failed unexpectedly")))


def _answered(source: Source, job: PreviewJob | DescribeJob | PlanJob) -> Answer:
    """A plan's reads, a describe's columns or a preview's cells, from `source`."""
    if isinstance(job, PlanJob):
        reads = source.relations(
            job.sql, job.values, job.requester, timeout_seconds=job.timeout_seconds
        )
        return Answer(planned=True, reads=reads)
    if isinstance(job, DescribeJob):
        found = source.describe(
            job.sql, job.values, job.requester, timeout_seconds=job.timeout_seconds
        )
        return Answer(columns=tuple(found))
    read = source.preview(
        job.sql,
        job.values,
        job.requester,
        timeout_seconds=job.timeout_seconds,
        max_rows=job.max_rows,
        max_cell_chars=job.max_cell_chars,
        max_bytes=job.max_bytes,
    )
    cells = preview_cells(read.table, max_chars=job.max_cell_chars, max_bytes=job.max_bytes)
    shown = PreviewCells(read.columns, cells.rows, read.more or cells.dropped, cells.cut)
    return Answer(cells=shown)


def _catalogued(sources: SourceCatalog, job: CatalogueJob) -> Answer:
    """What the source's catalogue says of the job's tables: read in this process, since
    DuckDB opens its file to answer, and a file opened in the server would be held there."""
    source = sources.source_for(job.source, job.workspace_id)
    found = source.catalogue(job.tables, timeout_seconds=job.timeout_seconds)
    return Answer(catalogued=True, catalogue=found)


def out_of_memory(budget: int) -> LimitExceededError:
    """The refusal of a statement that needed more than `budget` bytes."""
    return LimitExceededError(
        f"the statement needed more memory than a preview may use ({budget / _MIB:g} MiB,"
        " QEXPORT_PREVIEW_MAX_MEMORY); narrow the query: fewer rows, shorter values"
    )


def _out_of_memory(exc: BaseException) -> bool:
    """Whether `exc`, or what it was raised from, is an allocation that was refused."""
    seen: BaseException | None = exc
    for _ in range(10):  # a cause's chain is short; never follow a cycle
        if seen is None:
            return False
        if isinstance(seen, MemoryError | SourceOutOfMemoryError | MemoryRefusedError):
            return True
        seen = seen.__cause__ or seen.__context__
    return False


def _limit_data(budget: int) -> int:
    """RLIMIT_DATA at the process's data size now plus `budget` (Linux; elsewhere the size is
    not known and the limit is not set, which is logged); the size now."""
    size = data_size()
    if size is None:
        log.warning("preview_memory_not_limited", reason="no /proc/self/status")
        return 0
    _, hard = resource.getrlimit(resource.RLIMIT_DATA)
    wanted = size + budget
    if hard != resource.RLIM_INFINITY:
        wanted = min(wanted, hard)
    resource.setrlimit(resource.RLIMIT_DATA, (wanted, hard))
    return size


def data_size(pid: int | str = "self") -> int | None:
    """A process's data size (VmData: what RLIMIT_DATA counts), in bytes; None off Linux."""
    try:
        status = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    for line in status.splitlines():
        if line.startswith("VmData:"):
            return int(line.split()[1]) * 1024
    return None


def _end_with_parent(parent: int) -> None:
    """SIGKILL this process once `parent` ends (Linux), also when it ended already."""
    if sys.platform.startswith("linux"):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL)
    if os.getppid() != parent:
        os.kill(os.getpid(), signal.SIGKILL)
