"""Where previews run (previews/processes.py), on a real DuckDB file: in processes of their
own, started from the forkserver or forked, with a memory limit that a statement meets as a
clear `limit_exceeded` while the process that asked is untouched; a process that dies,
overruns its time or meets its limit is replaced, and none is left behind, not even as a
zombie."""

from __future__ import annotations

import multiprocessing
import os
import signal
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest

from qexport import bootstrap
from qexport.config import Settings
from qexport.domain.exports import Requester
from qexport.domain.failures import LimitExceededError, QueryInvalidError, QueryTimeoutError
from qexport.ports import DescribeJob, PreviewJob, SourceCatalog
from qexport.previews import processes
from qexport.previews.processes import PreviewProcesses
from qexport.store.engine import create_engine, migrate
from tests.fakes import FixedSources
from tests.unit.fakes import FakeSource

ANN = Requester("ann", "acme")
MIB = 1024**2


@pytest.fixture
def settings(tmp_path: Path) -> Settings:
    path = tmp_path / "shop.duckdb"
    with duckdb.connect(str(path)) as con:
        con.execute("CREATE TABLE orders AS SELECT range AS id FROM range(1000)")
    settings = Settings(
        data_dir=tmp_path / "data",
        sources={"shop": f"duckdb://{path}"},
        source_workspaces={"shop": frozenset({"acme"})},
    )
    # A preview process finds the source as any process does: among the registered ones too.
    settings.data_dir.mkdir()
    engine = create_engine(settings.database_url)
    migrate(engine)
    engine.dispose()
    return settings


def _job(sql: str, source: str = "shop", timeout: float = 10.0) -> PreviewJob:
    return PreviewJob(
        source=source,
        sql=sql,
        values={},
        requester=ANN,
        timeout_seconds=timeout,
        max_rows=100,
        max_cell_chars=1_000,
        max_bytes=256 * 1024,
    )


@pytest.fixture(params=["forkserver", "fork"])
def runner(request: pytest.FixtureRequest, settings: Settings) -> Iterator[PreviewProcesses]:
    found = bootstrap.preview_processes(settings, start_method=request.param)
    yield found
    found.close()


def _preview_children() -> list[multiprocessing.process.BaseProcess]:
    return [p for p in multiprocessing.active_children() if p.name == "qexport-preview"]


def _gone(pid: int) -> bool:
    """Exited and reaped: neither running nor a zombie."""
    return not Path(f"/proc/{pid}").exists()


def _wait(predicate: Callable[[], bool], timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_a_preview_runs_in_a_process_of_its_own_and_answers_cells(
    runner: PreviewProcesses,
) -> None:
    """The cells come back, read by a process that is not this one; a second preview reuses
    it; the source's refusal comes back as the same error."""
    cells = runner.run(_job("SELECT id, 'x' || id AS s FROM orders ORDER BY id LIMIT 3"))
    assert [c.name for c in cells.columns] == ["id", "s"]
    assert cells.rows == [[0, "x0"], [1, "x1"], [2, "x2"]]
    children = _preview_children()
    assert [p.pid for p in children] != [os.getpid()]
    assert len(children) == 1
    assert runner.run(_job("SELECT count(*) AS n FROM orders")).rows == [[1000]]
    assert [p.pid for p in _preview_children()] == [p.pid for p in children]
    with pytest.raises(QueryInvalidError, match="nothing_here"):
        runner.run(_job("SELECT * FROM nothing_here"))


def test_a_statement_past_the_memory_limit_fails_clearly_and_the_next_runs(
    runner: PreviewProcesses,
) -> None:
    """`repeat('x', 1e9)` needs a gigabyte: limit_exceeded naming the limit and its setting,
    in milliseconds, not a grown process; the process is replaced, and the next preview
    answers."""
    before = _preview_children()
    with pytest.raises(LimitExceededError) as caught:
        runner.run(_job("SELECT length(repeat('x', 1000000000)) AS n"))
    assert "512 MiB, QEXPORT_PREVIEW_MAX_MEMORY" in caught.value.detail
    for gone in before:
        _wait(lambda gone=gone: _gone(gone.pid))  # type: ignore[misc]
    assert runner.run(_job("SELECT 42 AS n")).rows == [[42]]


def test_within_the_limit_large_statements_still_run(runner: PreviewProcesses) -> None:
    """The default limit is room for real work, one preview after another: a grouping into
    20 million groups (DuckDB spills past its own memory limit), a 100 MB string, a sort of
    30 million rows."""
    groups = "SELECT count(*) AS n FROM (SELECT i, count(*) FROM range(20000000) t(i) GROUP BY i)"
    assert runner.run(_job(groups, timeout=120)).rows == [[20_000_000]]
    cells = runner.run(_job("SELECT length(repeat('x', 100000000)) AS n"))
    assert cells.rows == [[100_000_000]]
    top = "SELECT i FROM range(30000000) t(i) ORDER BY i DESC LIMIT 1"
    assert runner.run(_job(top, timeout=120)).rows == [[29_999_999]]


class _Dies:
    """A source whose preview kills its own process, as the kernel's OOM killer would."""

    name = "dies"

    def preview(self, *_args: object, **_kwargs: object) -> None:
        os.kill(os.getpid(), signal.SIGKILL)


class _Hangs:
    """A source whose preview ignores its timeout (a C call that never checks)."""

    name = "hangs"

    def preview(self, *_args: object, **_kwargs: object) -> None:
        signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGTERM})
        time.sleep(600)


def _scripted(_settings: Settings) -> tuple[SourceCatalog, Callable[[], None]]:
    sources = {"ok": FakeSource(pa.table({"n": [1]})), "dies": _Dies(), "hangs": _Hangs()}
    return FixedSources(sources), lambda: None  # type: ignore[dict-item]


@pytest.fixture
def scripted(settings: Settings) -> Iterator[PreviewProcesses]:
    """Forked, so that the sources of this module are what the processes open."""
    found = PreviewProcesses(settings, _scripted, start_method="fork")
    yield found
    found.close()


def test_a_process_that_dies_mid_preview_is_reaped_and_replaced(
    scripted: PreviewProcesses,
) -> None:
    """Killed while it ran a preview: that preview fails limit_exceeded saying the process
    ended; the process is reaped (no zombie); the next preview runs in a new one."""
    assert scripted.run(_job("SELECT 1", "ok")).rows == [[1]]
    [first] = _preview_children()
    with pytest.raises(LimitExceededError, match="killed by SIGKILL before it answered"):
        scripted.run(_job("SELECT 1", "dies"))
    _wait(lambda: _gone(first.pid))
    assert scripted.run(_job("SELECT 1", "ok")).rows == [[1]]
    assert [p.pid for p in _preview_children()] != [first.pid]


def test_a_process_killed_while_waiting_is_replaced(scripted: PreviewProcesses) -> None:
    """A waiting process that was killed is not handed a preview: a new one answers."""
    scripted.run(_job("SELECT 1", "ok"))
    [first] = _preview_children()
    os.kill(first.pid, signal.SIGKILL)
    _wait(lambda: not first.is_alive())
    assert scripted.run(_job("SELECT 1", "ok")).rows == [[1]]
    _wait(lambda: _gone(first.pid))


def test_a_process_that_overruns_its_time_is_killed(
    scripted: PreviewProcesses, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A preview that ignores its statement timeout ends in query_timeout once the grace
    after it passes; its process is killed and reaped."""
    monkeypatch.setattr(processes, "KILL_AFTER_SECONDS", 0.2)
    scripted.run(_job("SELECT 1", "ok"))
    [first] = _preview_children()
    with pytest.raises(QueryTimeoutError):
        scripted.run(_job("SELECT 1", "hangs", timeout=0.3))
    _wait(lambda: _gone(first.pid))
    assert scripted.run(_job("SELECT 1", "ok")).rows == [[1]]


def test_previews_at_once_each_have_a_process_and_close_leaves_none(
    runner: PreviewProcesses,
) -> None:
    """Four previews at once run in four processes; afterwards at most KEEP_IDLE wait; `close`
    stops those, and each is reaped."""
    barrier = threading.Barrier(4)
    answers: list[object] = []

    def preview() -> None:
        barrier.wait(timeout=30)
        answers.append(runner.run(_job("SELECT count(*) AS n FROM range(20000000)")).rows)

    threads = [threading.Thread(target=preview) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=120)
    assert answers == [[[20_000_000]]] * 4
    waiting = _preview_children()
    assert len(waiting) <= processes.KEEP_IDLE
    runner.close()
    assert _preview_children() == []
    for process in waiting:
        _wait(lambda process=process: _gone(process.pid))  # type: ignore[misc]


def test_a_statement_is_described_in_a_preview_process_too(runner: PreviewProcesses) -> None:
    """Describing a query being saved runs there as well, and its columns come back. DuckDB
    folds constants as it plans: `length(repeat('x', 1e9))` took 7 s and 2 GiB where it was
    described; within the limit the folding fails, DuckDB keeps the expression as it is, and
    the columns come back at once."""
    described = runner.describe(
        DescribeJob("shop", "SELECT id, 'x' AS s FROM orders", {}, ANN, timeout_seconds=10)
    )
    assert [(c.name, c.type) for c in described] == [("id", "BIGINT"), ("s", "VARCHAR")]
    huge = DescribeJob(
        "shop", "SELECT length(repeat('x', 1000000000)) AS n", {}, ANN, timeout_seconds=10
    )
    assert [(c.name, c.type) for c in runner.describe(huge)] == [("n", "BIGINT")]
