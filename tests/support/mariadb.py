"""A MariaDB server of the tests' own: Debian's mariadbd on a temporary data directory.

`mariadb_server` (session scoped) runs `mariadb-install-db` into a fresh directory and starts
`/usr/sbin/mariadbd` on 127.0.0.1 and a free port, with its own socket and pid file and no
other networking, then creates the database `qexport_test`, a read-only login (`reader`:
SELECT on it and nothing else), an admin login, and the tables the tests read (`types`: one
row of every type the source maps, one of NULLs; `people`). Each pytest-xdist worker starts
its own server: nothing is shared, nothing to lock. Any MariaDB already running on the
machine is never used. Without the server binary or the driver (mysqlclient, which builds
only against libmariadb-dev with pkg-config; `require_mysqlclient` for a module that imports
it) the tests skip, except under CI, where that fails the run.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import quote

import pytest

from tests.support.orphans import dying_with_parent

MARIADBD = "/usr/sbin/mariadbd"
DATABASE = "qexport_test"
READER, READER_PASSWORD = "reader", "Read-0nly pw"
ADMIN, ADMIN_PASSWORD = "admin", "Adm1n pw"
_START_SECONDS = 60

TYPES_TABLE = """
CREATE TABLE types (
    id INT PRIMARY KEY,
    tiny TINYINT, small SMALLINT UNSIGNED, medium MEDIUMINT, regular INT,
    big BIGINT, ubig BIGINT UNSIGNED,
    price DECIMAL(12, 2), exact DECIMAL(38, 10), huge DECIMAL(50, 4),
    ratio DOUBLE, approx FLOAT,
    day DATE, moment DATETIME(6), stamped TIMESTAMP(6) NULL, clock TIME(3), yr YEAR,
    flags BIT(5), flag BIT(1),
    doc JSON, blobby BLOB, fixed BINARY(4), word VARCHAR(40), body TEXT,
    colour ENUM('red', 'green'), tags SET('a', 'b')
) CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci
"""
TYPES_ROWS = """
INSERT INTO types VALUES
(1, -128, 65535, -8388608, -2147483648, -9223372036854775808, 18446744073709551615,
 1234567890.12, 1234567890123456789012345678.0123456789,
 1234567890123456789012345678901234567890123456.0001,
 0.1 + 0.2, 0.5, '2024-02-29', '2024-02-29 23:59:59.123456',
 '2024-03-01 12:00:00.5', '23:59:59.999', 2024, b'10101', b'1',
 '{"a": [1, "two"]}', x'00ff10', x'61626300', 'grüße 😀', 'line1\\nline2, "quoted"',
 'green', 'a,b'),
(2, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL,
 NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL, NULL)
"""
PEOPLE_TABLE = """
CREATE TABLE people (id INT PRIMARY KEY, name VARCHAR(40), owner VARCHAR(40))
CHARACTER SET utf8mb4
"""
PEOPLE_ROWS = "INSERT INTO people VALUES (1, 'Ann', 'u-alice'), (2, 'Bob', 'u-bob')"


@dataclass(frozen=True)
class MariaDBServer:
    """A running server: where it listens, and URLs for the source (`url`)."""

    host: str
    port: int
    socket: Path
    database: str = DATABASE

    def url(
        self, user: str = READER, password: str = READER_PASSWORD, *, scheme: str = "mysql"
    ) -> str:
        """`scheme://user:password@127.0.0.1:port/qexport_test`, the read-only login by
        default."""
        auth = f"{quote(user, safe='')}:{quote(password, safe='')}"
        return f"{scheme}://{auth}@{self.host}:{self.port}/{self.database}"

    @property
    def admin_url(self) -> str:
        return self.url(ADMIN, ADMIN_PASSWORD)

    def execute(self, *statements: str) -> list[tuple[Any, ...]]:
        """Run statements as root over the socket; the rows of the last one."""
        import MySQLdb

        conn = MySQLdb.connect(
            unix_socket=str(self.socket), user="root", charset="utf8mb4", autocommit=True
        )
        try:
            cursor = conn.cursor()
            rows: list[tuple[Any, ...]] = []
            for statement in statements:
                cursor.execute(statement)
                rows = list(cursor.fetchall() or [])
            return rows
        finally:
            conn.close()


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port: int = probe.getsockname()[1]
        return port


def _unavailable(reason: str) -> None:
    if os.environ.get("CI"):
        pytest.fail(f"CI needs a MariaDB server binary and mysqlclient: {reason}")
    pytest.skip(reason, allow_module_level=True)


def require_mysqlclient() -> None:
    """Skip the calling test, or module, without mysqlclient (`import MySQLdb`); in CI, fail
    instead. A module calls it before importing anything that imports the driver."""
    try:
        import MySQLdb  # noqa: F401 - only whether it is there
    except ImportError:
        _unavailable(
            "mysqlclient is not installed (it builds against libmariadb-dev with pkg-config;"
            " scripts/dev.sh test says how to add them)"
        )


def _as_root() -> list[str]:
    # mariadbd refuses to run as root unless told to (CI and the dev machines run as root).
    return ["--user=root"] if os.geteuid() == 0 else []


def _install(install: str, data: Path, directory: Path) -> None:
    """`mariadb-install-db` into `data`, its temporary files under `directory` (not the
    machine's /tmp, which every pytest-xdist worker's install shares); tried twice, since an
    install beside another one has failed now and then, and the second failure says why."""
    command = [
        install,
        "--no-defaults",
        f"--datadir={data}",
        f"--tmpdir={directory}",
        "--auth-root-authentication-method=socket",
        "--skip-test-db",
        *_as_root(),
    ]
    for attempt in (1, 2):
        done = subprocess.run(command, check=False, capture_output=True)
        if done.returncode == 0:
            return
        shutil.rmtree(data, ignore_errors=True)
        if attempt == 2:
            output = (done.stdout + done.stderr).decode(errors="replace")[-2000:]
            raise RuntimeError(f"mariadb-install-db failed ({done.returncode}):\n{output}")


def start_server(directory: Path) -> tuple[MariaDBServer, subprocess.Popen[bytes]]:
    """Install a data directory under `directory` and start mariadbd on it; the server and
    its process (stop it with `stop_server`)."""
    data = directory / "data"
    install = shutil.which("mariadb-install-db") or shutil.which("mysql_install_db")
    if install is None or not Path(MARIADBD).is_file():
        _unavailable(
            f"{MARIADBD} or mariadb-install-db is missing (apt-get install mariadb-server)"
        )
        raise AssertionError("unreachable")
    _install(install, data, directory)
    sock = directory / "mariadb.sock"
    port = _free_port()
    process = subprocess.Popen(
        dying_with_parent(
            [
                MARIADBD,
                "--no-defaults",
                f"--datadir={data}",
                f"--socket={sock}",
                f"--pid-file={directory / 'mariadb.pid'}",
                f"--log-error={directory / 'error.log'}",
                f"--tmpdir={directory}",
                f"--port={port}",
                "--bind-address=127.0.0.1",
                "--skip-name-resolve",
                "--skip-log-bin",
                "--character-set-server=utf8mb4",
                "--collation-server=utf8mb4_unicode_ci",
                "--innodb-buffer-pool-size=32M",
                "--innodb-log-file-size=16M",
                "--max-connections=60",
                *_as_root(),
            ]
        ),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    server = MariaDBServer("127.0.0.1", port, sock)
    deadline = time.monotonic() + _START_SECONDS
    while True:
        try:
            server.execute("SELECT 1")
            break
        except Exception:
            if process.poll() is not None or time.monotonic() > deadline:
                error_log = directory / "error.log"
                log = error_log.read_text(errors="replace")[-2000:] if error_log.exists() else ""
                stop_server(process)
                raise RuntimeError(
                    f"mariadbd did not start (exit code {process.returncode}):\n{log}"
                ) from None
            time.sleep(0.2)
    return server, process


def stop_server(process: subprocess.Popen[bytes]) -> None:
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _populate(server: MariaDBServer) -> None:
    server.execute(
        f"CREATE DATABASE {DATABASE} CHARACTER SET utf8mb4 COLLATE utf8mb4_unicode_ci",
        f"CREATE USER '{READER}'@'%' IDENTIFIED BY '{READER_PASSWORD}'",
        f"GRANT SELECT ON {DATABASE}.* TO '{READER}'@'%'",
        f"CREATE USER '{ADMIN}'@'%' IDENTIFIED BY '{ADMIN_PASSWORD}'",
        f"GRANT ALL PRIVILEGES ON *.* TO '{ADMIN}'@'%' WITH GRANT OPTION",
        f"USE {DATABASE}",
        # A lax sql_mode, as old applications have: zero dates can be stored.
        "SET SESSION sql_mode = ''",
        TYPES_TABLE,
        TYPES_ROWS,
        PEOPLE_TABLE,
        PEOPLE_ROWS,
        "CREATE TABLE zero_dates (id INT, day DATE, moment DATETIME, stamped TIMESTAMP NULL)",
        "INSERT INTO zero_dates VALUES (1, '0000-00-00', '0000-00-00 00:00:00',"
        " '0000-00-00 00:00:00'), (2, '2024-00-10', '2024-05-00 10:00:00', NULL),"
        " (3, '2024-01-02', '2024-01-02 03:04:05', '2024-01-02 03:04:05')",
    )


@pytest.fixture(scope="session")
def mariadb_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[MariaDBServer]:
    """A running MariaDB with `qexport_test` populated; `.url()` is the read-only login's
    mysql:// URL, `.admin_url` a privileged one, `.execute(...)` runs SQL as root."""
    require_mysqlclient()
    directory = tmp_path_factory.mktemp("mariadb")
    server, process = start_server(directory)
    try:
        _populate(server)
        yield server
    finally:
        stop_server(process)
