"""The egress policy: where qexport may connect on a member's behalf (webhooks).

A member names a URL; without a policy the server would POST wherever it points, including
its own loopback, the private network and the cloud metadata service (169.254.169.254), and
a delivery's error would tell an open port from a closed one. So a destination's name is
resolved ONCE (getaddrinfo, which also reads the odd literal forms `127.1`, `0x7f000001` and
`2130706433` that `ipaddress` refuses), EVERY resolved address is checked, and the connection
then goes to a checked address, never to the name again: a second resolution could answer
differently (DNS rebinding). The operator opens internal destinations with
`QEXPORT_EGRESS_ALLOW` (CIDRs and host names). SMTP is the operator's own server: exempt.

Refused by default: every range of the IANA IPv4 and IPv6 Special-Purpose Address
Registries (the tables below, each entry with its name and RFC: a hand-picked list had let
the documentation ranges and Teredo through), multicast, the IPv6 space outside global
unicast, the cloud host address 168.63.129.16, and the addresses of this machine's own
interfaces (host_addresses.py), which no table can know. An IPv6 form that carries an IPv4
address (mapped, translated, compatible, NAT64, 6to4, Teredo) is judged by that address.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from qexport.net.host_addresses import own_addresses

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., Sequence[tuple[Any, ...]]]
OwnAddresses = Callable[[], Mapping[IPAddress, str]]


@dataclass(frozen=True)
class SpecialRange:
    """A range the policy refuses by default: its name and where it is defined.

    `embeds`: the range carries an IPv4 address (IPv4-mapped, NAT64, 6to4, Teredo...), and an
    address in it is judged by the IPv4 address(es) it carries instead: refused when one of
    them is, whatever the IPv6 form (a 6to4 or NAT64 gateway, or a dual-stack socket,
    delivers to the IPv4 address)."""

    cidr: str
    name: str
    reference: str
    embeds: bool = False

    @property
    def network(self) -> Network:
        return ipaddress.ip_network(self.cidr)


# The IANA IPv4 Special-Purpose Address Registry (RFC 6890, RFC 8190), every entry, the
# globally reachable ones too (AS112, AMT, the anycast services): none is a place a member's
# webhook or source belongs.
IPV4_SPECIAL_PURPOSE: tuple[SpecialRange, ...] = (
    SpecialRange("0.0.0.0/8", "this network", "RFC 791"),
    SpecialRange("0.0.0.0/32", "this host on this network", "RFC 1122"),
    SpecialRange("10.0.0.0/8", "private-use", "RFC 1918"),
    SpecialRange("100.64.0.0/10", "shared address space (carrier-grade NAT)", "RFC 6598"),
    SpecialRange("127.0.0.0/8", "loopback", "RFC 1122"),
    SpecialRange("169.254.0.0/16", "link-local (the cloud metadata service)", "RFC 3927"),
    SpecialRange("172.16.0.0/12", "private-use", "RFC 1918"),
    SpecialRange("192.0.0.0/24", "IETF protocol assignments", "RFC 6890"),
    SpecialRange("192.0.0.0/29", "IPv4 service continuity prefix", "RFC 7335"),
    SpecialRange("192.0.0.8/32", "IPv4 dummy address", "RFC 7600"),
    SpecialRange("192.0.0.9/32", "Port Control Protocol anycast", "RFC 7723"),
    SpecialRange("192.0.0.10/32", "TURN anycast", "RFC 8155"),
    SpecialRange("192.0.0.170/32", "NAT64/DNS64 discovery", "RFC 8880"),
    SpecialRange("192.0.0.171/32", "NAT64/DNS64 discovery", "RFC 8880"),
    SpecialRange("192.0.2.0/24", "documentation (TEST-NET-1)", "RFC 5737"),
    SpecialRange("192.31.196.0/24", "AS112-v4", "RFC 7535"),
    SpecialRange("192.52.193.0/24", "AMT", "RFC 7450"),
    SpecialRange("192.88.99.0/24", "deprecated 6to4 relay anycast", "RFC 7526"),
    SpecialRange("192.88.99.2/32", "6a44 relay anycast", "RFC 6751"),
    SpecialRange("192.168.0.0/16", "private-use", "RFC 1918"),
    SpecialRange("192.175.48.0/24", "direct delegation AS112 service", "RFC 7534"),
    SpecialRange("198.18.0.0/15", "benchmarking", "RFC 2544"),
    SpecialRange("198.51.100.0/24", "documentation (TEST-NET-2)", "RFC 5737"),
    SpecialRange("203.0.113.0/24", "documentation (TEST-NET-3)", "RFC 5737"),
    SpecialRange("240.0.0.0/4", "reserved", "RFC 1112"),
    SpecialRange("255.255.255.255/32", "limited broadcast", "RFC 919"),
)

# The IANA IPv6 Special-Purpose Address Registry, every entry. The local-use NAT64 prefix is
# refused whole: where its IPv4 address sits depends on the operator's own translator (RFC
# 6052 allows prefixes of /32 to /96 inside it), which reaches the operator's own network.
IPV6_SPECIAL_PURPOSE: tuple[SpecialRange, ...] = (
    SpecialRange("::1/128", "loopback", "RFC 4291"),
    SpecialRange("::/128", "unspecified", "RFC 4291"),
    SpecialRange("::ffff:0:0/96", "IPv4-mapped", "RFC 4291", embeds=True),
    SpecialRange("64:ff9b::/96", "NAT64 well-known prefix", "RFC 6052", embeds=True),
    SpecialRange("64:ff9b:1::/48", "local-use NAT64", "RFC 8215"),
    SpecialRange("100::/64", "discard-only", "RFC 6666"),
    SpecialRange("100:0:0:1::/64", "dummy IPv6 prefix", "RFC 9780"),
    SpecialRange("2001::/23", "IETF protocol assignments", "RFC 2928"),
    SpecialRange("2001::/32", "Teredo", "RFC 4380", embeds=True),
    SpecialRange("2001:1::1/128", "Port Control Protocol anycast", "RFC 7723"),
    SpecialRange("2001:1::2/128", "TURN anycast", "RFC 8155"),
    SpecialRange("2001:1::3/128", "DNS-SD service registration protocol anycast", "RFC 9665"),
    SpecialRange("2001:2::/48", "benchmarking", "RFC 5180"),
    SpecialRange("2001:3::/32", "AMT", "RFC 7450"),
    SpecialRange("2001:4:112::/48", "AS112-v6", "RFC 7535"),
    SpecialRange("2001:10::/28", "deprecated ORCHID", "RFC 4843"),
    SpecialRange("2001:20::/28", "ORCHIDv2", "RFC 7343"),
    SpecialRange("2001:30::/28", "drone remote ID entity tags", "RFC 9374"),
    SpecialRange("2001:db8::/32", "documentation", "RFC 3849"),
    SpecialRange("2002::/16", "6to4", "RFC 3056", embeds=True),
    SpecialRange("2620:4f:8000::/48", "direct delegation AS112 service", "RFC 7534"),
    SpecialRange("3fff::/20", "documentation", "RFC 9637"),
    SpecialRange("5f00::/16", "segment routing (SRv6) SIDs", "RFC 9602"),
    SpecialRange("fc00::/7", "unique-local", "RFC 4193"),
    SpecialRange("fe80::/10", "link-local", "RFC 4291"),
)

# Refused beside the registries: multicast, the IPv6 space outside global unicast (IANA's
# IPv6 Address Space registry reserves all but 2000::/3), the older IPv4-in-IPv6 forms, and
# the one cloud host address outside the link-local range.
OTHER_REFUSED: tuple[SpecialRange, ...] = (
    SpecialRange("224.0.0.0/4", "multicast", "RFC 5771"),
    SpecialRange("::/3", "reserved by the IETF (not global unicast)", "RFC 4291"),
    SpecialRange("4000::/2", "reserved by the IETF (not global unicast)", "RFC 4291"),
    SpecialRange("8000::/1", "reserved by the IETF (not global unicast)", "RFC 4291"),
    SpecialRange("fec0::/10", "deprecated site-local", "RFC 3879"),
    SpecialRange("ff00::/8", "multicast", "RFC 4291"),
    SpecialRange("::/96", "IPv4-compatible (deprecated)", "RFC 4291", embeds=True),
    SpecialRange("::ffff:0:0:0/96", "IPv4-translated", "RFC 2765", embeds=True),
    SpecialRange(
        "168.63.129.16/32",
        "Azure host address (VM agent, DNS, health probes)",
        "Azure documentation",
    ),
)

# Most specific first: an address is judged by the narrowest range that holds it (Teredo's
# /32 inside 2001::/23, ::1/128 inside ::/96).
_BY_SPECIFICITY: tuple[tuple[Network, SpecialRange], ...] = tuple(
    sorted(
        ((r.network, r) for r in (*IPV4_SPECIAL_PURPOSE, *IPV6_SPECIAL_PURPOSE, *OTHER_REFUSED)),
        key=lambda pair: -pair[0].prefixlen,
    )
)


class EgressRefusedError(Exception):
    """The destination is refused; `reason` is for the operator's log, never for members."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnresolvedError(Exception):
    """The host name could not be resolved (now): a transient failure, not a refusal."""


def special_range(ip: IPAddress) -> SpecialRange | None:
    """The narrowest refused range that holds `ip`, if any."""
    for network, special in _BY_SPECIFICITY:
        if ip.version == network.version and ip in network:
            return special
    return None


def embedded_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, ...]:
    """The IPv4 addresses an IPv6 form carries (mapped, translated, compatible, NAT64, 6to4,
    Teredo's server and client); none for any other address."""
    special = special_range(ip)
    if not isinstance(ip, ipaddress.IPv6Address) or special is None or not special.embeds:
        return ()
    if ip.teredo is not None:
        return ip.teredo
    if ip.sixtofour is not None:
        return (ip.sixtofour,)
    return (ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF),)


def refused_class(ip: IPAddress, own: Mapping[IPAddress, str] | None = None) -> str | None:
    """Why `ip` is refused by default ("loopback (RFC 1122)", ...), or None if it is not;
    `own`: this machine's interface addresses, with their interface's name."""
    own = own or {}
    if ip in own:
        return f"an address of this machine's interface {own[ip]}"
    special = special_range(ip)
    if special is None:
        return None
    if not special.embeds:
        return f"{special.name} ({special.reference})"
    for inner in embedded_ipv4(ip):
        if (what := refused_class(inner, own)) is not None:
            return f"{special.name} form of {inner}, {what}"
    return None


def parse_allow(text: str) -> tuple[tuple[Network, ...], frozenset[str]]:
    """`QEXPORT_EGRESS_ALLOW`: comma-separated CIDRs (or addresses) and host names."""
    networks: list[Network] = []
    hosts: set[str] = set()
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        try:
            networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            continue
        except ValueError:
            pass
        host = normal_host(entry)
        if not host or any(c in host for c in "/:@ ") or host.startswith("."):
            raise ValueError(f"{entry!r} is neither a CIDR nor a host name")
        hosts.add(host)
    return tuple(networks), frozenset(hosts)


def normal_host(host: str) -> str:
    """A host name as compared: lower case, without brackets or a trailing dot."""
    return host.strip().strip("[]").rstrip(".").lower()


def _address(text: str) -> IPAddress:
    return ipaddress.ip_address(text.split("%", 1)[0])  # drop an IPv6 zone id (fe80::1%eth0)


@dataclass(frozen=True)
class EgressPolicy:
    """Which destinations a member may make qexport connect to. The default refuses every
    special-purpose address and this machine's own; `allow` (from QEXPORT_EGRESS_ALLOW)
    opens networks or host names."""

    allow_networks: tuple[Network, ...] = ()
    allow_hosts: frozenset[str] = frozenset()
    resolve: Resolver = field(default=socket.getaddrinfo, repr=False, compare=False)
    own_addresses: OwnAddresses = field(default=own_addresses, repr=False, compare=False)

    @classmethod
    def from_allow(cls, text: str) -> EgressPolicy:
        networks, hosts = parse_allow(text)
        return cls(networks, hosts)

    def _allowed(self, ip: IPAddress) -> bool:
        forms: list[IPAddress] = [ip, *embedded_ipv4(ip)]
        return any(f.version == n.version and f in n for f in forms for n in self.allow_networks)

    def check_address(self, ip: IPAddress) -> None:
        """EgressRefusedError unless `ip` is public and not this machine's, or opened by the
        allow-list."""
        what = refused_class(ip, self.own_addresses())
        if what is not None and not self._allowed(ip):
            raise EgressRefusedError(f"{ip} is refused: {what}")

    def resolve_checked(self, host: str, port: int) -> list[IPAddress]:
        """Resolve `host` once and check every address; the addresses to connect to, in the
        resolver's order. EgressRefusedError if any is refused (a name that also answers an
        internal address is refused whole); UnresolvedError when nothing resolves."""
        name = normal_host(host)
        if name in self.allow_hosts:
            return self._lookup(name, port)
        addresses = self._lookup(name, port)
        for ip in addresses:
            self.check_address(ip)
        return addresses

    def _lookup(self, name: str, port: int) -> list[IPAddress]:
        try:
            infos = self.resolve(name, port, type=socket.SOCK_STREAM, proto=socket.IPPROTO_TCP)
        except (OSError, UnicodeError) as exc:  # socket.gaierror is an OSError
            raise UnresolvedError(f"could not resolve {name!r}: {exc}") from exc
        found: list[IPAddress] = []
        for info in infos:
            ip = _address(str(info[4][0]))
            if ip not in found:
                found.append(ip)
        if not found:
            raise UnresolvedError(f"{name!r} resolved to no address")
        return found


def check_webhook_host(host: str, hosts: Collection[str] | None) -> None:
    """EgressRefusedError unless the workspace allows webhooks to `host` (None: any host)."""
    if hosts is not None and normal_host(host) not in {normal_host(h) for h in hosts}:
        raise EgressRefusedError(
            f"{normal_host(host)!r} is not among the workspace's webhook hosts"
        )
