"""`qexport serve` believes X-Forwarded-For only from QEXPORT_TRUSTED_PROXIES: a client on
this machine (127.0.0.1, which uvicorn trusted by default) cannot choose the address the
audit trail records and sign-in throttling counts under."""

from __future__ import annotations

import re
import signal
import subprocess
import sys
from datetime import UTC, datetime, timedelta

import httpx2

from qexport.store.accounts import SqlAccountStore
from tests.e2e.conftest import Env
from tests.e2e.test_serve import start_server
from tests.e2e.test_sign_in_flood import PASSWORD, add_person

CLAIMED = "203.0.113.9"
_CSRF = re.compile(r'name="csrf" value="([^"]+)"')


def _wrong_password_claiming(url: str, email: str) -> None:
    """A sign-in with a wrong password whose request says it was forwarded for CLAIMED."""
    with httpx2.Client(base_url=url, timeout=60) as browser:
        token = _CSRF.search(browser.get("/sign-in").text)
        assert token
        response = browser.post(
            "/sign-in",
            data={"email": email, "password": "wrong", "csrf": token[1]},
            headers={"X-Forwarded-For": CLAIMED},
            follow_redirects=False,
        )
        assert response.status_code == 400, response.text


def _recorded_and_counted(env: Env, email: str) -> tuple[list[str], dict[str, int]]:
    """The addresses of the sign-in events, and the failures counted per address."""
    events = env.json("audit", "list", "--action", "sign_in")["items"]
    accounts = SqlAccountStore(env.store.engine)
    since = datetime.now(UTC) - timedelta(hours=1)
    counted = {
        address: accounts.sign_in_failures(email, address, since=since).address.count
        for address in ("127.0.0.1", CLAIMED)
    }
    return [e["client_address"] for e in events], counted


def test_forwarded_for_is_believed_only_from_a_trusted_proxy(env: Env) -> None:
    """By default a client on 127.0.0.1 claiming another address is recorded and counted as
    127.0.0.1; with QEXPORT_TRUSTED_PROXIES=127.0.0.1 (a proxy on this machine) the address
    it forwards for is."""
    add_person(env, "ann@example.com", PASSWORD)
    url, server = start_server(env)
    _wrong_password_claiming(url, "ann@example.com")
    assert _recorded_and_counted(env, "ann@example.com") == (
        ["127.0.0.1"],
        {"127.0.0.1": 1, CLAIMED: 0},
    )
    server.send_signal(signal.SIGTERM)
    assert server.wait(timeout=30) == 0

    env.extra["QEXPORT_TRUSTED_PROXIES"] = "127.0.0.1"
    url, _ = start_server(env)
    _wrong_password_claiming(url, "ann@example.com")
    addresses, counted = _recorded_and_counted(env, "ann@example.com")
    assert addresses == [CLAIMED, "127.0.0.1"]  # newest first
    assert counted == {"127.0.0.1": 1, CLAIMED: 1}


def test_serve_refuses_uvicorns_variable_without_the_setting(env: Env) -> None:
    """FORWARDED_ALLOW_IPS alone (which qexport does not read) stops `serve` with exit 2 and
    the setting to use instead, rather than seeing every client as the proxy."""
    proc = subprocess.run(
        [sys.executable, "-m", "qexport", "serve", "--port", "1"],
        env={**env.environ, "FORWARDED_ALLOW_IPS": "10.0.0.5"},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    assert "QEXPORT_TRUSTED_PROXIES" in proc.stderr
    assert "FORWARDED_ALLOW_IPS" in proc.stderr
