"""End-to-end helpers: the CLI and workers as real subprocesses on a private data dir."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient

from qexport import bootstrap
from qexport.app import create_app
from qexport.bootstrap import audit_keys
from qexport.clock import SystemClock
from qexport.config import Settings
from qexport.domain.commands import RequestExport, SubjectRef
from qexport.domain.exports import ExportRecord, Requester
from qexport.domain.queries import Parameter, Query
from qexport.services.requests import record_request
from qexport.sources.demo_data import build_demo_database
from qexport.storage.filesystem import FilesystemObjectStore
from qexport.store.audit.chain import use_keys
from qexport.store.engine import create_engine
from tests.support.stores import SqlMetadataStore


@dataclass
class Env:
    data_dir: Path
    extra: dict[str, str] = field(default_factory=dict)
    procs: list[subprocess.Popen[bytes]] = field(default_factory=list)
    _store: SqlMetadataStore | None = None
    # Workers lead process groups of their own: what a `--processes` supervisor forked is
    # stopped with it at the end, even after the supervisor was killed (its children, told by
    # the parent-death signal to finish or hand back, would wait on a database the test
    # dropped).
    _groups: list[int] = field(default_factory=list)

    def stop_all(self) -> None:
        """Kill every process started for the test, and every worker's process group."""
        for proc in self.procs:
            if proc.poll() is None:
                proc.kill()
                proc.wait()
        for group in self._groups:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(group, signal.SIGKILL)

    @property
    def environ(self) -> dict[str, str]:
        env = {k: v for k, v in os.environ.items() if not k.startswith("QEXPORT_")}
        env.update(
            {
                "QEXPORT_DATA_DIR": str(self.data_dir),
                "QEXPORT_USER": "alice",
                "QEXPORT_WORKSPACE": "demo",
                **self.extra,
            }
        )
        return env

    def run(
        self, *args: str, check: bool = True, timeout: float = 120
    ) -> subprocess.CompletedProcess[str]:
        proc = subprocess.run(
            [sys.executable, "-m", "qexport", *args],
            env=self.environ,
            capture_output=True,
            text=True,
            timeout=timeout,
            check=False,
        )
        if check and proc.returncode != 0:
            raise AssertionError(
                f"qexport {' '.join(args)} exited {proc.returncode}:\n{proc.stdout}\n{proc.stderr}"
            )
        return proc

    def json(self, *args: str) -> Any:
        return json.loads(self.run(*args, "--json").stdout)

    def start_worker(self, *args: str, **extra_env: str) -> subprocess.Popen[bytes]:
        with (self.data_dir / f"worker-{len(self.procs)}.log").open("wb") as log:
            proc = subprocess.Popen(
                [sys.executable, "-m", "qexport", "worker", *args],
                env={**self.environ, **extra_env},
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        self.procs.append(proc)
        self._groups.append(proc.pid)
        return proc

    def add_query(self, name: str, sql: str, *params: Parameter, source: str = "demo") -> None:
        """Save a query in-process (faster than the CLI where the CLI is not under test), with
        no check by its source: for exports of SQL that saving would refuse."""
        self.store.add_query(
            Query(str(uuid.uuid4()), "demo", name, sql, source, params, owner="alice")
        )

    def request(self, query: str, fmt: str, **params: str) -> str:
        """Request an export in-process, as alice."""
        record = record_request(
            self.store,
            self.store,
            SystemClock(),
            Requester("alice", "demo"),
            RequestExport(SubjectRef("query", query, by_name=True), fmt, parameters=params),
        )
        return record.id

    @property
    def store(self) -> SqlMetadataStore:
        if self._store is None:
            settings = self.settings
            engine = create_engine(settings.database_url)
            keys = audit_keys(settings)
            assert keys is not None, "the commands' secret: QEXPORT_SECRET_KEY or generated"
            use_keys(engine, keys)  # the commands' keys, so that what they verify holds
            self._store = SqlMetadataStore(engine)
        return self._store

    @property
    def settings(self) -> Settings:
        """The settings the commands run with (from `environ`)."""
        return Settings.from_env(self.environ)

    def record(self, export_id: str) -> ExportRecord:
        found = self.store.get_export(export_id)
        assert found is not None
        return found

    @property
    def objects(self) -> FilesystemObjectStore:
        return FilesystemObjectStore(self.data_dir / "objects")

    def create(self, query: str, fmt: str, *params: str) -> str:
        args = ["exports", "create", "--query", query, "--format", fmt]
        for p in params:
            args += ["--param", p]
        return str(self.json(*args)["id"])

    def get(self, export_id: str) -> dict[str, Any]:
        return self.json("exports", "get", export_id)  # type: ignore[no-any-return]


def wait_for(predicate: Callable[[], Any], timeout: float = 60, interval: float = 0.05) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout} s waiting for {predicate}")


@pytest.fixture(scope="session")
def demo_db(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A demo database big enough that exports take a few seconds (built once)."""
    path = tmp_path_factory.mktemp("demo") / "demo.duckdb"
    build_demo_database(path, orders=400_000)
    return path


@pytest.fixture
def env(tmp_path: Path, demo_db: Path) -> Iterator[Env]:
    (tmp_path / "demo.duckdb").symlink_to(demo_db)
    e = Env(tmp_path)
    e.run("db", "upgrade")
    yield e
    e.stop_all()


@pytest.fixture
def linked_env(env: Env) -> Env:
    """`env` with the public address links point at (a scheduler needs it)."""
    env.extra["QEXPORT_PUBLIC_BASE_URL"] = "http://qexport.test"
    return env


@pytest.fixture
def api_client(env: Env) -> Iterator[TestClient]:
    """The HTTP API in this process, over the data dir the CLI writes, with the demo source
    for every workspace: the tests that use it are about accounts, not sources."""
    settings = Settings(data_dir=env.data_dir, source_workspaces={"demo": frozenset({"*"})})
    deps = bootstrap.build(settings, upgrade=False)
    with TestClient(create_app(deps)) as api:
        yield api


@pytest.fixture
def remote_cli(env: Env, tmp_path: Path) -> Env:
    """A CLI whose own data dir is empty and unused: everything comes from a `qexport serve`
    over `env`, which has the query small_orders."""
    # Imported here: test_serve imports this module, so a top-level import would be circular.
    from tests.e2e.test_serve import SMALL_ORDERS, N, new_token, start_server

    env.add_query("small_orders", SMALL_ORDERS, N)
    url, _ = start_server(env)
    token = new_token(env, "ann@example.com")
    return Env(tmp_path / "client", {"QEXPORT_URL": url, "QEXPORT_TOKEN": token})
