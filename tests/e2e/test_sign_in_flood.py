"""A flood of sign-ins against a real `qexport serve`: its memory stays bounded.

Each argon2 verification takes 64 MiB; twelve clients at once took a server's peak RSS from
156 to 925 MiB. Verifications now run two at a time (QEXPORT_SIGNIN_CONCURRENCY's default):
peak 285 MiB. Run with -s to see the figures.
"""

from __future__ import annotations

import re
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx2

from tests.e2e.conftest import Env
from tests.e2e.test_serve import start_server

PASSWORD = "correct horse battery staple"  # noqa: S105 - a test account's password
CLIENTS = 12
FLOOD_SECONDS = 8.0
MAX_GROWTH_MIB = 150
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def add_person(env: Env, email: str, password: str, workspace: str = "demo") -> None:
    """A viewer in `workspace` with `password`, made by the CLI (--password-stdin)."""
    proc = subprocess.run(
        [sys.executable, "-m", "qexport", "users", "create", email,
         "--workspace", workspace, "--role", "viewer", "--password-stdin"],
        env=env.environ,
        input=f"{password}\n",
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stderr


def _mib(pid: int, field: str) -> float:
    """A memory figure of /proc/PID/status (VmRSS, VmHWM) in MiB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(f"{field}:"):
            return int(line.split()[1]) / 1024
    raise AssertionError(f"no {field} for process {pid}")


def _reset_peak(pid: int) -> None:
    """Make VmHWM start again from the current RSS (Linux >= 4.0)."""
    Path(f"/proc/{pid}/clear_refs").write_text("5")


def _sign_in_repeatedly(
    url: str, stop: threading.Event, answers: list[int], errors: list[BaseException]
) -> None:
    """Sign in again and again as a fresh browser, until `stop`; answers and errors kept."""
    try:
        with httpx2.Client(base_url=url, timeout=60) as browser:
            while not stop.is_set():
                token = _CSRF.search(browser.get("/sign-in").text)
                assert token, "the sign-in form has no CSRF field"
                response = browser.post(
                    "/sign-in",
                    data={"email": "ann@example.com", "password": PASSWORD, "csrf": token[1]},
                    follow_redirects=False,
                )
                answers.append(response.status_code)
                browser.cookies.clear()
    except BaseException as exc:  # reported by the test, not lost with the thread
        errors.append(exc)


def test_a_sign_in_flood_keeps_the_servers_memory_bounded(env: Env) -> None:
    """Twelve clients signing in for 8 s raise the server's peak RSS by less than 150 MiB,
    and every one of them is answered (signed in, or told to retry)."""
    add_person(env, "ann@example.com", PASSWORD)
    url, server = start_server(env)
    with httpx2.Client(base_url=url, timeout=60) as browser:  # one sign-in: code paths loaded
        token = _CSRF.search(browser.get("/sign-in").text)
        assert token
        first = browser.post(
            "/sign-in",
            data={"email": "ann@example.com", "password": PASSWORD, "csrf": token.group(1)},
            follow_redirects=False,
        )
        assert first.status_code == 303, first.text
    before = _mib(server.pid, "VmRSS")
    _reset_peak(server.pid)

    stop = threading.Event()
    answers: list[int] = []
    errors: list[BaseException] = []
    clients = [
        threading.Thread(target=_sign_in_repeatedly, args=(url, stop, answers, errors))
        for _ in range(CLIENTS)
    ]
    for client in clients:
        client.start()
    time.sleep(FLOOD_SECONDS)
    stop.set()
    for client in clients:
        client.join(timeout=120)
    peak = _mib(server.pid, "VmHWM")

    counts = {code: answers.count(code) for code in sorted(set(answers))}
    print(f"server RSS {before:.0f} MiB before, peak {peak:.0f} MiB; answers {counts}")
    assert not errors, errors
    assert answers, "no sign-in was answered"
    assert set(answers) <= {303, 503}, sorted(set(answers))
    assert 303 in answers
    assert peak - before < MAX_GROWTH_MIB, f"{before:.0f} -> {peak:.0f} MiB"
