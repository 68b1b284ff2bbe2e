"""A Spark Connect server of the tests' own, from the pyspark package's jars.

`spark_server` (session scoped) starts `org.apache.spark.sql.connect.service.SparkConnectServer`
through pyspark's `bin/spark-submit` (`sbin/start-connect-server.sh` does the same behind a
daemon script that would outlive the tests), in local mode with two cores and 1 GB, bound to
127.0.0.1 on a free port, with its own warehouse, scratch, temp and log folders under the
session's temporary folder and an in-memory catalogue. The server's default time zone is
America/New_York, so that a source that did not set its session to UTC would show. It creates
the tables the tests read (`types`: one row of every type the source maps, one of NULLs;
`people`; `written`, empty). Each pytest-xdist worker starts its own server: nothing shared, nothing
to lock. Without java or pyspark the tests skip, except under CI, where that fails the run.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.support.orphans import dying_with_parent

_START_SECONDS = 120
SERVER_TIME_ZONE = "America/New_York"

TABLES = (
    """CREATE TABLE types (
        id INT, flag BOOLEAN, tiny TINYINT, small SMALLINT, regular INT, big BIGINT,
        ratio DOUBLE, approx FLOAT, price DECIMAL(12, 2), exact DECIMAL(38, 10),
        word STRING, code VARCHAR(8), blobby BINARY, day DATE, at TIMESTAMP,
        wall TIMESTAMP_NTZ, tags ARRAY<STRING>, attrs MAP<STRING, INT>,
        point STRUCT<x: INT, label: STRING>
    ) USING parquet""",
    """INSERT INTO types VALUES
    (1, true, -128, -32768, -2147483648, -9223372036854775808, 0.1D + 0.2D, 0.5F,
     1234567890.12, 1234567890123456789012345678.0123456789, 'grüße 😀\\n"quoted", comma',
     'abc', X'00FF10', DATE'2024-02-29', TIMESTAMP'2024-05-01 12:30:00.250+02:00',
     TIMESTAMP_NTZ'2024-02-29 23:59:59.123456', array('a', 'b'), map('k', 1),
     named_struct('x', 1, 'label', 'p')),
    (2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
     NULL, NULL, NULL, NULL)""",
    "CREATE TABLE people (id INT, name STRING, owner STRING) USING parquet",
    "INSERT INTO people VALUES (1, 'Ann', 'u-alice'), (2, 'Bob', 'u-bob')",
    "CREATE TABLE written (n INT) USING parquet",
)


@dataclass(frozen=True)
class SparkServer:
    """A running server: where it listens, and its `sc://` URL."""

    host: str
    port: int

    @property
    def url(self) -> str:
        return f"sc://{self.host}:{self.port}"

    def sql(self, *statements: str) -> list[tuple[object, ...]]:
        """Run statements in a session of their own; the rows of the last one."""
        from pyspark.sql.connect.session import SparkSession

        session = SparkSession.builder.remote(self.url).create()
        try:
            rows: list[tuple[object, ...]] = []
            for statement in statements:
                rows = [tuple(row) for row in session.sql(statement).collect()]
            return rows
        finally:
            session.stop()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI needs Java and pyspark for the Spark Connect server: {reason}")
    pytest.skip(reason)


def spark_home() -> Path | None:
    """pyspark's own folder (its bin/, sbin/ and jars/), or None when it is not installed."""
    try:
        import pyspark
    except ImportError:
        return None
    return Path(pyspark.__file__).parent


def start_server(
    directory: Path, *, memory: str = "1g"
) -> tuple[SparkServer, subprocess.Popen[bytes]]:
    """Start a Spark Connect server with its folders under `directory` and `memory` for its
    driver; the server and its process (stop it with `stop_server`)."""
    home = spark_home()
    if home is None or shutil.which("java") is None:
        _unavailable("java or pyspark is missing (apt-get install openjdk-17-jre-headless)")
        raise AssertionError("unreachable")
    folders = {name: directory / name for name in ("conf", "logs", "tmp", "local", "warehouse")}
    for folder in folders.values():
        folder.mkdir(parents=True, exist_ok=True)
    port = _free_port()
    conf = {
        "spark.master": "local[2]",
        "spark.driver.memory": memory,
        "spark.driver.host": "127.0.0.1",
        "spark.driver.bindAddress": "127.0.0.1",
        "spark.connect.grpc.binding.address": "127.0.0.1",
        "spark.connect.grpc.binding.port": str(port),
        "spark.ui.enabled": "false",
        "spark.sql.shuffle.partitions": "2",
        "spark.sql.catalogImplementation": "in-memory",
        "spark.sql.warehouse.dir": str(folders["warehouse"]),
        "spark.local.dir": str(folders["local"]),
        "spark.sql.session.timeZone": SERVER_TIME_ZONE,
        "spark.driver.extraJavaOptions": f"-Djava.io.tmpdir={folders['tmp']}",
    }
    arguments = [str(home / "bin" / "spark-submit")]
    arguments += ["--class", "org.apache.spark.sql.connect.service.SparkConnectServer"]
    arguments += ["--name", "qexport-tests"]
    for key, value in conf.items():
        arguments += ["--conf", f"{key}={value}"]
    environment = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_CONF_DIR": str(folders["conf"]),
        "SPARK_LOG_DIR": str(folders["logs"]),
        "SPARK_PID_DIR": str(directory),
    }
    log = directory / "server.log"
    with log.open("wb") as output:
        # Its own process group: whatever spark-submit starts is stopped with it.
        process = subprocess.Popen(
            dying_with_parent(arguments),
            cwd=directory,
            env=environment,
            stdin=subprocess.DEVNULL,
            stdout=output,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    server = SparkServer("127.0.0.1", port)
    deadline = time.monotonic() + _START_SECONDS
    while True:
        try:
            # The port first: pyspark's client retries a closed port for minutes on its own,
            # and a server that died meanwhile would go unnoticed.
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            server.sql("SELECT 1")
            break
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                stop_server(process)
                tail = log.read_text(errors="replace")[-3000:]
                raise RuntimeError(f"the Spark Connect server did not start:\n{tail}") from None
            time.sleep(0.5)
    return server, process


def stop_server(process: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the server's process group (the JVM stops its Spark context), then SIGKILL
    if it has not gone within 30 s: no java process is left behind."""
    if process.poll() is None:
        os.killpg(process.pid, signal.SIGTERM)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


@pytest.fixture(scope="session")
def pyspark_installed() -> None:
    """pyspark's Spark Connect client is installed (qexport[spark]): skip, or fail under CI."""
    if spark_home() is None:
        _unavailable("pyspark is not installed (pip install 'qexport[spark]')")


@pytest.fixture(scope="session")
def spark_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SparkServer]:
    """A running Spark Connect server with the tables created; `.url` is its sc:// URL,
    `.sql(...)` runs statements in a session of their own."""
    server, process = start_server(tmp_path_factory.mktemp("spark"))
    try:
        server.sql(*TABLES)
        yield server
    finally:
        stop_server(process)
