"""The egress policy's decisions on addresses, without a network: which forms are refused,
what the allow-list opens, and that one internal answer refuses a whole name."""

from __future__ import annotations

import ipaddress
import socket
from typing import Any

import pytest

from qexport.config import Settings
from qexport.net.egress import (
    IPV4_SPECIAL_PURPOSE,
    IPV6_SPECIAL_PURPOSE,
    OTHER_REFUSED,
    EgressPolicy,
    EgressRefusedError,
    SpecialRange,
    UnresolvedError,
    parse_allow,
    special_range,
)


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


# ---------------------------------------------------------------- the registries, entry by entry

EVERY_RANGE = [*IPV4_SPECIAL_PURPOSE, *IPV6_SPECIAL_PURPOSE, *OTHER_REFUSED]
NOT_THIS_MACHINE: dict[Any, str] = {}


def _policy(own: dict[Any, str] | None = None, allow: str = "") -> EgressPolicy:
    """The policy as configured by `allow`, on a machine whose interfaces have `own`."""
    networks, hosts = parse_allow(allow)
    found = NOT_THIS_MACHINE if own is None else own
    return EgressPolicy(networks, hosts, own_addresses=lambda: found)


def _refused(address: str, policy: EgressPolicy | None = None) -> bool:
    try:
        (policy or _policy()).check_address(ipaddress.ip_address(address))
    except EgressRefusedError:
        return True
    return False


@pytest.mark.parametrize("special", EVERY_RANGE, ids=[r.cidr for r in EVERY_RANGE])
def test_every_special_purpose_range_is_refused_from_its_first_to_its_last_address(
    special: SpecialRange,
) -> None:
    """Each entry of the IANA IPv4 and IPv6 special-purpose registries (and multicast, the
    reserved IPv6 space, the older IPv4-in-IPv6 forms, the Azure host address) is refused at
    its first and its last address, each entry named with its RFC; a form that carries an
    IPv4 address carries 0.0.0.0 and 255.255.255.255 there, refused in their turn."""
    assert special.name
    assert special.reference.startswith("RFC ") or "documentation" in special.reference
    network = special.network  # strict: a range written with host bits set fails here
    for address in (network[0], network[-1]):
        assert _refused(str(address)), f"{address} ({special.name}) was let through"


# Just outside a range, where the neighbour is ordinary public space (the ranges' edges are
# exact): the address before the first and after the last.
JUST_OUTSIDE = [
    "9.255.255.255", "11.0.0.0", "100.63.255.255", "100.128.0.0", "126.255.255.255",
    "128.0.0.0", "169.253.255.255", "169.255.0.0", "172.15.255.255", "172.32.0.0",
    "191.255.255.255", "192.0.1.0", "192.0.1.255", "192.0.3.0", "192.31.195.255",
    "192.31.197.0", "192.52.192.255", "192.52.194.0", "192.88.98.255", "192.88.100.0",
    "192.167.255.255", "192.169.0.0", "192.175.47.255", "192.175.49.0", "198.17.255.255",
    "198.20.0.0", "198.51.99.255", "198.51.101.0", "203.0.112.255", "203.0.114.0",
    "223.255.255.255", "168.63.129.15", "168.63.129.17", "1.0.0.0",
    "2000::", "2001:200::", "2001:db7:ffff:ffff:ffff:ffff:ffff:ffff", "2001:db9::",
    "2001:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "2003::", "2620:4f:7fff:ffff:ffff:ffff:ffff:ffff",
    "2620:4f:8001::", "3ffe:ffff:ffff:ffff:ffff:ffff:ffff:ffff", "3fff:1000::",
]  # fmt: skip


@pytest.mark.parametrize("address", JUST_OUTSIDE)
def test_the_public_address_just_outside_a_range_passes(address: str) -> None:
    """Each range ends where the registry says: the ordinary public address just before or
    after one is not refused."""
    assert not _refused(address)


def _teredo(server: str, client: str, port: int = 40000) -> str:
    """A Teredo address (RFC 4380): 2001:0::/32, the server, flags, then the client's port
    and address, both inverted."""
    value = (
        (0x20010000 << 96)
        | (int(ipaddress.IPv4Address(server)) << 64)
        | ((port ^ 0xFFFF) << 32)
        | (int(ipaddress.IPv4Address(client)) ^ 0xFFFFFFFF)
    )
    return str(ipaddress.IPv6Address(value))


@pytest.mark.parametrize(
    ("internal", "public"),
    [
        ("::ffff:192.0.2.1", "::ffff:8.8.8.8"),
        ("::ffff:0:c633:6401", "::ffff:0:808:808"),  # IPv4-translated: 198.51.100.1
        ("::203.0.113.9", "::8.8.8.8"),  # IPv4-compatible
        ("64:ff9b::a9fe:a9fe", "64:ff9b::808:808"),  # NAT64: 169.254.169.254
        ("2002:a00:1::", "2002:808:808::"),  # 6to4: 10.0.0.1
        (_teredo("65.54.227.120", "10.0.0.1"), _teredo("65.54.227.120", "8.8.8.8")),
        (_teredo("192.168.1.1", "8.8.8.8"), _teredo("8.8.4.4", "8.8.8.8")),
        (_teredo("65.54.227.120", "168.63.129.16"), _teredo("65.54.227.120", "1.1.1.1")),
    ],
)  # fmt: skip
def test_an_ipv6_form_that_carries_an_ipv4_address_is_judged_by_it(
    internal: str, public: str
) -> None:
    """Mapped, translated, compatible, NAT64, 6to4 and Teredo (server or client) addresses
    carrying an internal IPv4 address are refused, naming it; carrying a public one they
    pass, as that address itself would."""
    with pytest.raises(EgressRefusedError, match=r"form of \d+\.\d+\.\d+\.\d+"):
        _policy().check_address(ipaddress.ip_address(internal))
    assert not _refused(public)


def test_the_local_use_nat64_prefix_is_refused_whatever_it_carries() -> None:
    """64:ff9b:1::/48 translates through the operator's own gateway: refused even when the
    IPv4 address in its last 32 bits is public."""
    assert _refused("64:ff9b:1::808:808")
    assert _refused("64:ff9b:1:ffff:ffff:ffff:808:808")


@pytest.mark.parametrize(
    "address",
    ["192.0.2.10", "198.51.100.7", "203.0.113.200", "168.63.129.16", "2001:db8::1", "3fff::1"],
)
def test_the_addresses_the_review_got_through_are_refused_and_the_reason_names_the_range(
    address: str,
) -> None:
    """The documentation ranges and the Azure host address, refused with the registry's name
    of the range and its RFC for the operator's log."""
    with pytest.raises(EgressRefusedError) as refused:
        _policy().check_address(ipaddress.ip_address(address))
    special = special_range(ipaddress.ip_address(address))
    assert special is not None
    assert f"{special.name} ({special.reference})" in refused.value.reason


def test_the_machines_own_addresses_are_refused_unless_the_operator_allows_them() -> None:
    """An address of one of this machine's interfaces, public otherwise, is refused naming
    the interface, in its IPv4-mapped form too; QEXPORT_EGRESS_ALLOW opens it."""
    own = {
        ipaddress.ip_address("93.184.216.34"): "eth0",
        ipaddress.ip_address("2606:2800:220:1::1"): "eth1",
    }
    with pytest.raises(EgressRefusedError, match="interface eth0"):
        _policy(own).check_address(ipaddress.ip_address("93.184.216.34"))
    assert _refused("::ffff:93.184.216.34", _policy(own))
    assert _refused("2606:2800:220:1::1", _policy(own))
    assert not _refused("93.184.216.35", _policy(own))
    opened = _policy(own, allow="93.184.216.34/32, 2606:2800:220:1::/64")
    assert not _refused("93.184.216.34", opened)
    assert not _refused("2606:2800:220:1::1", opened)


@pytest.mark.parametrize(
    ("allow", "address"),
    [
        ("192.0.2.0/24", "192.0.2.10"),
        ("198.51.100.7", "::ffff:198.51.100.7"),
        ("10.0.0.0/8", "2002:a00:1::"),
        ("2001:db8::/32", "2001:db8::5"),
        ("168.63.129.16/32", "168.63.129.16"),
    ],
)
def test_the_allow_list_opens_any_special_range_it_names(allow: str, address: str) -> None:
    """QEXPORT_EGRESS_ALLOW still opens what the operator names, in any form of it."""
    assert _refused(address)
    assert not _refused(address, _policy(allow=allow))
