"""The egress policy: where qexport may connect on a member's behalf (webhooks).

A member names a URL; without a policy the server would POST wherever it points, including
its own loopback, the private network and the cloud metadata service (169.254.169.254), and
a delivery's error would tell an open port from a closed one. So a destination's name is
resolved ONCE (getaddrinfo, which also reads the odd literal forms `127.1`, `0x7f000001` and
`2130706433` that `ipaddress` refuses), EVERY resolved address is checked, and the connection
then goes to a checked address, never to the name again: a second resolution could answer
differently (DNS rebinding). The operator opens internal destinations with
`QEXPORT_EGRESS_ALLOW` (CIDRs and host names). SMTP is the operator's own server: exempt.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import Any

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network
Resolver = Callable[..., Sequence[tuple[Any, ...]]]

# What each refused range is, for the operator's log line (members only see "refused").
_REFUSED: tuple[tuple[str, str], ...] = (
    ("0.0.0.0/8", "unspecified"),
    ("10.0.0.0/8", "private"),
    ("100.64.0.0/10", "shared (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private"),
    ("192.0.0.0/24", "IETF protocol assignments"),
    ("192.168.0.0/16", "private"),
    ("198.18.0.0/15", "benchmarking"),
    ("224.0.0.0/4", "multicast"),
    ("240.0.0.0/4", "reserved or broadcast"),  # 255.255.255.255 included
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("64:ff9b:1::/48", "local-use NAT64"),  # RFC 8215: translates to the local network
    ("fc00::/7", "unique local"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "site-local"),
    ("ff00::/8", "multicast"),
)
_REFUSED_NETWORKS: tuple[tuple[Network, str], ...] = tuple(
    (ipaddress.ip_network(cidr), what) for cidr, what in _REFUSED
)
_COMPATIBLE = ipaddress.ip_network("::/96")  # deprecated IPv4-compatible IPv6 (::a.b.c.d)
_NAT64 = ipaddress.ip_network("64:ff9b::/96")  # well-known NAT64 prefix (RFC 6052)
_TRANSLATED = ipaddress.ip_network("::ffff:0:0:0/96")  # IPv4-translated (SIIT, RFC 2765)


class EgressRefusedError(Exception):
    """The destination is refused; `reason` is for the operator's log, never for members."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class UnresolvedError(Exception):
    """The host name could not be resolved (now): a transient failure, not a refusal."""


def embedded_ipv4(ip: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    """The IPv4 address an IPv6 form carries (mapped, translated, compatible, 6to4, NAT64),
    if any."""
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped
    if ip.sixtofour is not None:
        return ip.sixtofour
    if (
        ip in _NAT64 or ip in _TRANSLATED or (ip in _COMPATIBLE and int(ip) > 1)
    ):  # :: and ::1 are themselves
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    return None


def refused_class(ip: IPAddress) -> str | None:
    """What makes `ip` refused by default ("loopback", "private", ...), or None if it is not."""
    candidates: list[IPAddress] = [ip]
    if isinstance(ip, ipaddress.IPv6Address) and (inner := embedded_ipv4(ip)) is not None:
        candidates.append(inner)
    for candidate in candidates:
        for network, what in _REFUSED_NETWORKS:
            if candidate.version == network.version and candidate in network:
                return what
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
    internal address; `allow` (from QEXPORT_EGRESS_ALLOW) opens networks or host names."""

    allow_networks: tuple[Network, ...] = ()
    allow_hosts: frozenset[str] = frozenset()
    resolve: Resolver = field(default=socket.getaddrinfo, repr=False, compare=False)

    @classmethod
    def from_allow(cls, text: str) -> EgressPolicy:
        networks, hosts = parse_allow(text)
        return cls(networks, hosts)

    def _allowed(self, ip: IPAddress) -> bool:
        forms: list[IPAddress] = [ip]
        if isinstance(ip, ipaddress.IPv6Address) and (inner := embedded_ipv4(ip)) is not None:
            forms.append(inner)
        return any(f.version == n.version and f in n for f in forms for n in self.allow_networks)

    def check_address(self, ip: IPAddress) -> None:
        """EgressRefusedError unless `ip` is public or opened by the allow-list."""
        what = refused_class(ip)
        if what is not None and not self._allowed(ip):
            raise EgressRefusedError(f"{ip} is refused ({what})")

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
