"""The egress policy's decisions on addresses, without a network: which forms are refused,
what the allow-list opens, and that one internal answer refuses a whole name."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from qexport.config import Settings
from qexport.egress import EgressPolicy, EgressRefusedError, UnresolvedError


def _resolver(*addresses: str) -> Any:
    def resolve(host: str, port: int, **_: Any) -> list[tuple[Any, ...]]:
        if not addresses:
            raise socket.gaierror(socket.EAI_NONAME, "Name or service not known")
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (a, port)) for a in addresses]

    return resolve


@pytest.mark.parametrize(
    "address",
    [
        "127.0.0.1", "127.255.255.254", "0.0.0.0", "10.1.2.3", "172.16.0.1", "192.168.0.1",  # noqa: S104 - an address under test
        "100.64.0.1", "169.254.169.254", "224.0.0.1", "255.255.255.255", "::1", "::",
        "fc00::1", "fd12::1", "fe80::1", "ff02::1", "::ffff:127.0.0.1", "::ffff:10.0.0.1",
        "::127.0.0.1", "64:ff9b::7f00:1", "2002:7f00:1::", "::ffff:169.254.169.254",
        "::ffff:0:7f00:1", "::ffff:0:a9fe:a9fe", "64:ff9b:1::a00:5",
    ],
)  # fmt: skip
def test_internal_addresses_in_every_form_are_refused(address: str) -> None:
    """Loopback, unspecified, private, shared, link-local, multicast, broadcast and their
    IPv4-mapped, -translated, -compatible, NAT64 (also local-use) and 6to4 forms are refused
    by default."""
    with pytest.raises(EgressRefusedError):
        EgressPolicy().check_address(ipaddress.ip_address(address))


@pytest.mark.parametrize("address", ["93.184.216.34", "2606:2800:220:1::1", "::ffff:8.8.8.8"])
def test_public_addresses_pass(address: str) -> None:
    """Public addresses, also written as IPv4-mapped IPv6, are not refused."""
    EgressPolicy().check_address(ipaddress.ip_address(address))


def test_one_internal_answer_refuses_the_whole_name() -> None:
    """A name answering a public and a private address is refused: every answer is checked."""
    policy = EgressPolicy(resolve=_resolver("93.184.216.34", "10.0.0.5"))
    with pytest.raises(EgressRefusedError, match=r"10\.0\.0\.5"):
        policy.resolve_checked("rebind.example", 443)


def test_the_checked_addresses_are_returned_in_order() -> None:
    """The addresses to connect to are exactly the ones resolved (once) and checked."""
    policy = EgressPolicy(resolve=_resolver("93.184.216.34", "93.184.216.35"))
    assert [str(a) for a in policy.resolve_checked("ok.example", 443)] == [
        "93.184.216.34",
        "93.184.216.35",
    ]


def test_an_unresolvable_name_is_not_a_refusal() -> None:
    """A name that does not resolve is UnresolvedError (retried later), not a refusal."""
    with pytest.raises(UnresolvedError):
        EgressPolicy(resolve=_resolver()).resolve_checked("gone.example", 443)


def test_the_allow_list_opens_networks_and_names() -> None:
    """CIDRs open their addresses (also IPv4-mapped); a host name opens that name only."""
    policy = EgressPolicy.from_allow(" 10.0.0.0/8, Hooks.Internal. ,::1")
    policy.check_address(ipaddress.ip_address("10.9.9.9"))
    policy.check_address(ipaddress.ip_address("::ffff:10.9.9.9"))
    policy.check_address(ipaddress.ip_address("::1"))
    with pytest.raises(EgressRefusedError):
        policy.check_address(ipaddress.ip_address("192.168.0.1"))
    named = EgressPolicy(policy.allow_networks, policy.allow_hosts, _resolver("192.168.0.7"))
    assert [str(a) for a in named.resolve_checked("hooks.internal", 80)] == ["192.168.0.7"]
    with pytest.raises(EgressRefusedError):
        named.resolve_checked("other.internal", 80)


def test_a_malformed_allow_list_names_the_variable() -> None:
    """QEXPORT_EGRESS_ALLOW with an entry that is neither a CIDR nor a host name fails."""
    with pytest.raises(ValueError, match="QEXPORT_EGRESS_ALLOW"):
        Settings.from_env({"QEXPORT_EGRESS_ALLOW": "10.0.0.0/8, http://x/"})
