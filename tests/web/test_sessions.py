"""Sessions end on the server, disabled users are shut out, and sign-in guessing is throttled."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest
from fastapi.testclient import TestClient

from qexport import bootstrap
from qexport.app import create_app
from qexport.domain.accounts import Role
from qexport.http.one_hop import API_THREADS
from qexport.services import accounts as service
from qexport.services.sign_in import VerificationGate
from qexport.web.session import COOKIE
from tests.api.conftest import Api
from tests.web.conftest import PASSWORD, Browser, add_person, csrf_of

THROTTLED = "Too many failed sign-ins."


def _asks_to_sign_in(client: TestClient) -> bool:
    """Whether a page sends this client to the sign-in page."""
    response = client.get("/", follow_redirects=False)
    return response.status_code == 303 and response.headers["location"].startswith("/sign-in")


def _second_device(api: Api, browser: Browser) -> TestClient:
    """Another client carrying a copy of the browser's session cookie, as a second device
    (or a stolen cookie) would."""
    other = TestClient(api.client.app)
    cookie = browser.client.cookies.get(COOKIE)
    assert cookie
    other.cookies.set(COOKIE, cookie)
    assert not _asks_to_sign_in(other)
    return other


def _sign_out(api: Api, browser: Browser) -> None:
    token = csrf_of(browser.page("/"))
    response = browser.client.post("/sign-out", data={"csrf": token}, follow_redirects=False)
    assert response.status_code == 303


def _change_password(api: Api, browser: Browser) -> None:
    service.change_password(api.context.accounts, "ann@example.com", "a new password")


def _remove(api: Api, browser: Browser) -> None:
    service.remove_member(
        api.context.accounts,
        api.context.schedules,
        api.clock,
        "ann@example.com",
        workspace="acme",
    )


def _disable(api: Api, browser: Browser) -> None:
    service.set_disabled(
        api.context.accounts, api.context.schedules, api.clock, "ann@example.com", disabled=True
    )


@pytest.mark.parametrize(
    "end",
    [_sign_out, _change_password, _remove, _disable],
    ids=["sign-out", "password change", "removal", "disabling"],
)
def test_an_old_cookie_gets_the_sign_in_page_once_the_sessions_end(
    api: Api, browser: Browser, end: Callable[[Api, Browser], None]
) -> None:
    """After each of these, a copy of the session cookie made before (another device, a
    stolen cookie) is sent to the sign-in page, as is the browser itself."""
    add_person(api, "ann@example.com")
    add_person(api, "ada@example.com", "admin")
    browser.sign_in("ann@example.com")
    other = _second_device(api, browser)
    end(api, browser)
    assert _asks_to_sign_in(other)
    assert _asks_to_sign_in(browser.client)


def test_signing_in_again_after_a_password_change_works_with_the_new_password(
    api: Api, browser: Browser
) -> None:
    """The old password is refused, the new one signs in and its session works."""
    add_person(api, "ann@example.com")
    _change_password(api, browser)
    html = browser.page("/sign-in")
    refused = browser.client.post(
        "/sign-in",
        data={"email": "ann@example.com", "password": PASSWORD, "csrf": csrf_of(html)},
    )
    assert refused.status_code == 400
    browser.sign_in("ann@example.com", "a new password")
    assert not _asks_to_sign_in(browser.client)


def test_a_disabled_user_cannot_sign_in_or_use_a_token_until_enabled(
    api: Api, browser: Browser
) -> None:
    """Disabled: the right password gets the same refusal as a wrong one and their token
    gets 401; enabled again: both work."""
    add_person(api, "ann@example.com")
    api.member("ann@example.com", "editor")  # a token for her, same account
    assert api.get("/api/v1/queries", "ann@example.com").status_code == 200
    _disable(api, browser)
    html = browser.page("/sign-in")
    response = browser.client.post(
        "/sign-in",
        data={"email": "ann@example.com", "password": PASSWORD, "csrf": csrf_of(html)},
    )
    assert response.status_code == 400
    assert "The email or password is not right." in response.text
    assert api.get("/api/v1/queries", "ann@example.com").status_code == 401
    service.set_disabled(
        api.context.accounts, api.context.schedules, api.clock, "ann@example.com", disabled=False
    )
    assert api.get("/api/v1/queries", "ann@example.com").status_code == 200
    browser.sign_in("ann@example.com")


def test_a_removed_members_token_for_the_workspace_is_revoked(api: Api) -> None:
    """Removal revokes the tokens for that workspace: adding them back does not revive them."""
    api.member("ada@example.com", "admin")
    api.member("ann@example.com", "viewer")
    token = api.tokens["ann@example.com"]
    _remove(api, Browser(api.client))
    assert api.get("/api/v1/queries", token).status_code == 401
    api.context.accounts.set_role("acme", api.user_id("ann@example.com"), Role.VIEWER)
    assert api.get("/api/v1/queries", token).status_code == 401


def _try(browser: Browser, email: str, password: str) -> tuple[int, str | None, str]:
    """One sign-in from the form: (status, Retry-After, page)."""
    html = browser.page("/sign-in")
    response = browser.client.post(
        "/sign-in",
        data={"email": email, "password": password, "csrf": csrf_of(html)},
        follow_redirects=False,
    )
    return response.status_code, response.headers.get("retry-after"), response.text


@pytest.mark.parametrize("email", ["ann@example.com", "nobody@example.com"])
def test_five_failures_for_an_account_lock_it_with_a_growing_retry_after(
    api: Api, browser: Browser, email: str
) -> None:
    """After 5 failures the next attempt gets 429 and Retry-After 30 even with the right
    password (an unknown email alike: nothing to probe); after the wait one more try is
    allowed, and failing it doubles the wait."""
    add_person(api, "ann@example.com")
    for _ in range(5):
        assert _try(browser, email, "wrong")[0] == 400
    status, retry_after, page = _try(browser, email, PASSWORD)
    assert (status, retry_after) == (429, "30")
    assert THROTTLED in page
    assert 'role="alert"' in page
    assert csrf_of(page)
    api.clock.advance(10)
    assert _try(browser, email, PASSWORD)[:2] == (429, "20")
    api.clock.advance(20)
    assert _try(browser, email, "wrong")[0] == 400
    assert _try(browser, email, "wrong")[:2] == (429, "60")
    api.clock.advance(60)
    assert _try(browser, email, "wrong")[0] == 400
    assert _try(browser, email, "wrong")[:2] == (429, "120")


def test_a_locked_account_does_not_lock_another(api: Api, browser: Browser) -> None:
    """Bob signs in while Ann's account is locked; Ann signs in once the wait is over, and
    her failures are then forgotten."""
    add_person(api, "ann@example.com")
    add_person(api, "bob@example.com")
    for _ in range(5):
        _try(browser, "ann@example.com", "wrong")
    assert _try(browser, "bob@example.com", PASSWORD)[0] == 303
    api.clock.advance(30)
    assert _try(Browser(TestClient(api.client.app)), "ann@example.com", PASSWORD)[0] == 303
    for _ in range(4):
        assert _try(browser, "ann@example.com", "wrong")[0] == 400
    assert _try(browser, "ann@example.com", PASSWORD)[0] == 303


def test_twenty_failures_from_one_address_lock_it_for_every_email(
    api: Api, browser: Browser
) -> None:
    """Twenty failures spread over many emails from one address: the next attempt from it,
    for any email, gets 429 with a Retry-After."""
    add_person(api, "ann@example.com")
    for i in range(20):
        assert _try(browser, f"guess{i % 4}@example.com", "wrong")[0] == 400
    status, retry_after, _ = _try(browser, "ann@example.com", PASSWORD)
    assert (status, retry_after) == (429, "30")
    api.clock.advance(15 * 60 + 1)
    assert _try(browser, "ann@example.com", PASSWORD)[0] == 303


def test_failures_on_one_server_lock_the_account_on_another(api: Api, browser: Browser) -> None:
    """Two server processes on one metadata database: five failures through the first, and
    the second answers 429 too."""
    add_person(api, "ann@example.com")
    for _ in range(5):
        assert _try(browser, "ann@example.com", "wrong")[0] == 400
    settings = api.context.settings
    deps = bootstrap.build(settings, clock=api.clock, upgrade=False)
    with TestClient(create_app(deps)) as second:
        status, retry_after, _ = _try(Browser(second), "ann@example.com", PASSWORD)
    assert (status, retry_after) == (429, "30")


class _FullGate(VerificationGate):
    """A gate whose slots stay taken."""

    @contextmanager
    def slot(self) -> Iterator[bool]:
        yield False


def test_a_sign_in_when_every_slot_is_taken_gets_503_and_the_form_again(
    api: Api, browser: Browser
) -> None:
    """503 with Retry-After, the form with its CSRF field and the reason as an alert; no
    failure is counted against the account."""
    add_person(api, "ann@example.com")
    app = api.client.app
    real = app.state.sign_in_gate  # type: ignore[attr-defined]  # Starlette's app type hides state
    app.state.sign_in_gate = _FullGate(1)  # type: ignore[attr-defined]  # as above
    for _ in range(6):
        status, retry_after, page = _try(browser, "ann@example.com", PASSWORD)
        assert (status, retry_after) == (503, "2")
        assert "The server is busy" in page
        assert 'role="alert"' in page
        assert csrf_of(page)
    app.state.sign_in_gate = real  # type: ignore[attr-defined]  # as above
    assert _try(browser, "ann@example.com", PASSWORD)[0] == 303


class _HeldGate(VerificationGate):
    """A gate whose slot waits until released, as one does while others check passwords."""

    def __init__(self) -> None:
        super().__init__(1)
        self.inside = threading.Semaphore(0)
        self.release = threading.Event()

    @contextmanager
    def slot(self) -> Iterator[bool]:
        self.inside.release()
        self.release.wait(timeout=30)
        yield False


def test_sign_ins_waiting_for_a_password_check_leave_the_requests_threads_free(
    api: Api, browser: Browser
) -> None:
    """As many sign-ins wait for a password check as the server has request threads (a
    flood): the API still answers meanwhile, and the sign-ins get their 503 after."""
    add_person(api, "ann@example.com")
    token = api.member("ed@example.com", "editor")
    app = api.client.app
    real = app.state.sign_in_gate  # type: ignore[attr-defined]  # Starlette's app type hides state
    gate = _HeldGate()
    app.state.sign_in_gate = gate  # type: ignore[attr-defined]  # as above
    form = {
        "email": "ann@example.com",
        "password": PASSWORD,
        "csrf": csrf_of(browser.page("/sign-in")),
    }
    flood = API_THREADS  # on the requests' threads, these would hold every one
    with ThreadPoolExecutor(flood + 1) as pool:
        waiting = [
            pool.submit(browser.client.post, "/sign-in", data=form, follow_redirects=False)
            for _ in range(flood)
        ]
        try:
            for _ in range(flood):
                assert gate.inside.acquire(timeout=30), "a sign-in did not reach its check"
            headers = {"Authorization": f"Bearer {token}"}
            listed = pool.submit(api.client.get, "/api/v1/exports", headers=headers)
            # (A bound for a failure, not a timing: held threads would make it wait for ever.)
            assert listed.result(timeout=30).status_code == 200
        finally:
            gate.release.set()
        assert [answer.result(timeout=30).status_code for answer in waiting] == [503] * flood
    app.state.sign_in_gate = real  # type: ignore[attr-defined]  # as above
