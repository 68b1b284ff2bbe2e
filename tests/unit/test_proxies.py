"""Whose X-Forwarded-For is believed, and which address it gives (net/proxies.py): decisions on
strings, no network."""

from __future__ import annotations

import pytest

from qexport.config import Settings
from qexport.net.proxies import TrustedProxies, parse_address

BALANCERS = TrustedProxies.parse("10.0.0.5, 10.1.0.0/24,::1")


@pytest.mark.parametrize(
    ("peer", "forwarded_for", "client"),
    [
        # Not a trusted proxy: the header is the client's own word, ignored.
        ("127.0.0.1", ["203.0.113.9"], "127.0.0.1"),
        ("198.51.100.4", ["10.0.0.5"], "198.51.100.4"),
        # One trusted proxy: the address it appended.
        ("10.0.0.5", ["203.0.113.9"], "203.0.113.9"),
        # What the client wrote itself is left of what the proxy appended: never taken.
        ("10.0.0.5", ["1.2.3.4, 203.0.113.9"], "203.0.113.9"),
        ("10.0.0.5", ["1.2.3.4", "203.0.113.9"], "203.0.113.9"),  # two header lines
        # A chain of trusted proxies: the right-most address that is not one of them.
        ("10.0.0.5", ["1.2.3.4, 203.0.113.9, 10.1.0.7"], "203.0.113.9"),
        # Every entry a trusted proxy: the left-most.
        ("10.0.0.5", ["10.1.0.8, 10.1.0.7"], "10.1.0.8"),
        # No header, or an empty one: the proxy itself.
        ("10.0.0.5", [], "10.0.0.5"),
        ("10.0.0.5", [""], "10.0.0.5"),
        # Something that is not an address ends the walk at the last trusted hop.
        ("10.0.0.5", ["203.0.113.9, unknown"], "10.0.0.5"),
        ("10.0.0.5", ["evil, 10.1.0.7"], "10.1.0.7"),
        # Forms proxies write: ports, brackets, IPv6; IPv4-mapped peers of a dual-stack socket.
        ("10.0.0.5", ["203.0.113.9:51234"], "203.0.113.9"),
        ("10.0.0.5", ["[2001:db8::7]:443"], "2001:db8::7"),
        ("::1", ["2001:DB8::7"], "2001:db8::7"),
        ("::ffff:10.0.0.5", ["203.0.113.9"], "203.0.113.9"),
        ("10.1.0.200", ["203.0.113.9"], "203.0.113.9"),
        ("10.1.1.1", ["203.0.113.9"], "10.1.1.1"),  # just outside 10.1.0.0/24
    ],
)  # fmt: skip
def test_the_client_is_the_right_most_address_no_trusted_proxy_wrote(
    peer: str, forwarded_for: list[str], client: str
) -> None:
    """X-Forwarded-For counts only on a trusted proxy's connection, and then only from the
    right, past the trusted proxies, up to the first address nobody trusted vouches for."""
    assert BALANCERS.client(peer, forwarded_for) == client


def test_no_proxy_is_trusted_by_default() -> None:
    """Without QEXPORT_TRUSTED_PROXIES, loopback's X-Forwarded-For is ignored too."""
    default = Settings().proxies()
    assert default.networks == ()
    assert default.client("127.0.0.1", ["203.0.113.9"]) == "127.0.0.1"
    assert default.client("::1", ["203.0.113.9"]) == "::1"
    assert default.scheme("127.0.0.1", ["https"]) is None


def test_the_scheme_comes_from_a_trusted_proxy_only() -> None:
    """X-Forwarded-Proto from a trusted proxy sets http or https (its right-most value);
    anything else, or from anyone else, keeps the connection's own."""
    assert BALANCERS.scheme("10.0.0.5", ["https"]) == "https"
    assert BALANCERS.scheme("10.0.0.5", ["http, HTTPS"]) == "https"
    assert BALANCERS.scheme("10.0.0.5", ["gopher"]) is None
    assert BALANCERS.scheme("198.51.100.4", ["https"]) is None


def test_a_long_header_is_walked_from_the_right_only() -> None:
    """A header of thousands of entries costs a bounded walk, and the client's padding on
    the left changes nothing."""
    padded = ", ".join(["10.1.0.9"] * 5000 + ["203.0.113.9", "10.1.0.7"])
    assert BALANCERS.client("10.0.0.5", [padded]) == "203.0.113.9"


@pytest.mark.parametrize("text", ["proxy.internal", "10.0.0.0/33", "*", "10.0.0.5 10.0.0.6"])
def test_a_setting_that_is_not_addresses_or_cidrs_names_the_variable(text: str) -> None:
    """Names, wildcards and malformed CIDRs are refused when the settings are read."""
    with pytest.raises(ValueError, match="QEXPORT_TRUSTED_PROXIES"):
        Settings.from_env({"QEXPORT_TRUSTED_PROXIES": text})


@pytest.mark.parametrize(
    ("text", "address"),
    [("203.0.113.9", "203.0.113.9"), (" [::1]:80 ", "::1"), ("fe80::1%eth0", "fe80::1"),
     ("unknown", None), ("_hidden", None), ("", None), ("1.2.3.4:x", None)],
)  # fmt: skip
def test_addresses_are_read_as_proxies_write_them(text: str, address: str | None) -> None:
    """Bare, with a port, bracketed, with a zone id; nothing else is an address."""
    found = parse_address(text)
    assert (str(found) if found is not None else None) == address
