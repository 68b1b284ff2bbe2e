"""Wrong passwords cannot lock an account's owner out (domain/sign_in.py): failures are held
against the address they came from, and guesses spread over many addresses are slowed, never
locked; on SQLite and PostgreSQL, each client with an address of its own."""

from __future__ import annotations

from fastapi.testclient import TestClient

from qexport.domain.sign_in import ACCOUNT_CEILING, ACCOUNT_DELAY, PAIR_LIMIT
from qexport.web.session import COOKIE
from tests.api.conftest import Api
from tests.support.passwords import argon2_once_per_pair
from tests.web.conftest import PASSWORD, Browser, add_person, csrf_of

__all__ = ["argon2_once_per_pair"]  # autouse: the throttle is under test, not the hash

ANN = "ann@example.com"
ATTACKER = "203.0.113.66"
OWNER = "198.51.100.10"


def _from(api: Api, address: str) -> Browser:
    """A new browser whose connections come from `address`."""
    return Browser(TestClient(api.client.app, client=(address, 40000)))


def _try(browser: Browser, password: str) -> tuple[int, str | None, str]:
    """One sign-in as Ann from the form: (status, Retry-After, page)."""
    html = browser.page("/sign-in")
    response = browser.client.post(
        "/sign-in",
        data={"email": ANN, "password": password, "csrf": csrf_of(html)},
        follow_redirects=False,
    )
    return response.status_code, response.headers.get("retry-after"), response.text


def _spread(api: Api, failures: int) -> None:
    """`failures` wrong passwords for Ann, from addresses that each stay under their limit."""
    per_address = PAIR_LIMIT - 1
    for i in range(failures):
        attacker = _from(api, f"192.0.2.{i // per_address + 1}")
        assert _try(attacker, "wrong")[0] == 400


def test_a_flood_from_one_address_throttles_it_and_not_the_owner(api_both: Api) -> None:
    """Wrong passwords from A: five refusals, then A gets 429, its right password too; the
    owner's right password from B signs in at once, and A stays throttled."""
    add_person(api_both, ANN)
    attacker, owner = _from(api_both, ATTACKER), _from(api_both, OWNER)
    for _ in range(PAIR_LIMIT):
        assert _try(attacker, "wrong")[0] == 400
    for _ in range(3):
        assert _try(attacker, "wrong")[:2] == (429, "30")
    assert _try(attacker, PASSWORD)[:2] == (429, "30")
    assert _try(owner, PASSWORD)[0] == 303
    assert _try(_from(api_both, ATTACKER), PASSWORD)[:2] == (429, "30")


def test_guesses_from_many_addresses_slow_the_account_then_the_password_works(
    api_both: Api,
) -> None:
    """Past the account's ceiling (failures from many addresses, each under its own limit)
    a new address is told to wait a few seconds (429, Retry-After 5, said on the page), and
    once that time has passed the right password signs in."""
    add_person(api_both, ANN)
    _spread(api_both, ACCOUNT_CEILING)
    owner = _from(api_both, OWNER)
    status, retry_after, page = _try(owner, PASSWORD)
    assert (status, retry_after) == (429, str(int(ACCOUNT_DELAY.total_seconds())))
    assert "Try again in 5 seconds" in page
    api_both.clock.advance(ACCOUNT_DELAY.total_seconds())
    assert _try(owner, PASSWORD)[0] == 303


def test_the_browser_the_owner_signed_in_from_is_not_slowed(api_both: Api) -> None:
    """While guesses keep the account past its ceiling, the browser Ann signed in from
    before signs in at once; a new browser at the same address still waits."""
    add_person(api_both, ANN)
    owner = _from(api_both, OWNER)
    assert _try(owner, PASSWORD)[0] == 303
    owner.client.cookies.delete(COOKIE)  # the session ended; the browser is still known
    _spread(api_both, ACCOUNT_CEILING)
    assert _try(_from(api_both, OWNER), PASSWORD)[:2] == (429, "5")
    assert _try(owner, PASSWORD)[0] == 303
