"""Whose forwarding headers are believed: QEXPORT_TRUSTED_PROXIES.

A request's client address is written into the audit trail and keys the sign-in throttle,
so whoever chooses it writes any address on record and escapes (or aims) the throttle.
uvicorn believed `X-Forwarded-For` from 127.0.0.1 and ::1 by default (its
FORWARDED_ALLOW_IPS): any process on the machine, or a proxy in front that passed the header
through untouched, chose its own address. qexport turns uvicorn's reading off and reads the
header itself, only on connections from the proxies the operator names (default: none).

From a trusted proxy, the client is the right-most address of `X-Forwarded-For` that is not
itself a trusted proxy: each proxy appends the address its connection came from, so what
lies right of that entry was written by proxies the operator trusts, and everything left of
it by whoever connected (any value at all). When every entry is a trusted proxy, the
left-most is the client; an entry that is not an address (`unknown`, a name) ends the walk
at the last trusted hop, never taking a value nobody vouches for. `X-Forwarded-Proto` from a
trusted proxy gives the scheme (cookies marked Secure behind a TLS proxy). `Forwarded` (RFC
7239) is not read, from anyone: one header, one reading, nothing to reconcile.

Pure: no I/O.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address
Network = ipaddress.IPv4Network | ipaddress.IPv6Network

# The header a chain may grow to before the walk stops looking: an entry per hop, and no
# deployment has 64 proxies in a row.
MAX_HOPS = 64
SCHEMES = frozenset({"http", "https"})


def parse_address(text: str) -> IPAddress | None:
    """An address as proxies write it: bare, `[v6]:port`, `v4:port`, with an IPv6 zone id
    dropped; None for anything else."""
    value, port = text.strip(), ""
    if value.startswith("[") and "]" in value:
        value, rest = value[1:].split("]", 1)
        port = rest.removeprefix(":") if rest else "0"
    elif value.count(":") == 1:  # v4:port (a bare IPv6 address has at least two colons)
        value, port = value.split(":", 1)
    if port and not (port.isascii() and port.isdigit()):
        return None
    try:
        return ipaddress.ip_address(value.split("%", 1)[0])
    except ValueError:
        return None


@dataclass(frozen=True)
class TrustedProxies:
    """The networks whose connections' forwarding headers are believed (none by default)."""

    networks: tuple[Network, ...] = ()

    @classmethod
    def parse(cls, text: str) -> TrustedProxies:
        """`QEXPORT_TRUSTED_PROXIES`: comma-separated addresses and CIDRs; ValueError naming
        an entry that is neither (host names are refused: a name's addresses can change)."""
        networks: list[Network] = []
        for raw in text.split(","):
            entry = raw.strip()
            if not entry:
                continue
            try:
                networks.append(ipaddress.ip_network(entry.strip("[]"), strict=False))
            except ValueError:
                raise ValueError(
                    f"{entry!r} is not an address or a CIDR (e.g. 10.0.0.5, 10.0.0.0/24, ::1)"
                ) from None
        return cls(tuple(networks))

    def trusts(self, address: IPAddress) -> bool:
        """Whether `address` (also as an IPv4-mapped IPv6 peer) is a trusted proxy's."""
        forms: list[IPAddress] = [address]
        if isinstance(address, ipaddress.IPv6Address) and address.ipv4_mapped is not None:
            forms.append(address.ipv4_mapped)
        return any(f.version == n.version and f in n for f in forms for n in self.networks)

    def client(self, peer: str, forwarded_for: Sequence[str]) -> str:
        """The client's address for a connection from `peer` carrying these X-Forwarded-For
        header values (in the order received): `peer` itself unless it is a trusted proxy."""
        peer_address = parse_address(peer)
        if peer_address is None or not self.trusts(peer_address):
            return peer
        hops = [hop for value in forwarded_for for hop in value.split(",")][-MAX_HOPS:]
        client = peer_address
        for hop in reversed(hops):
            address = parse_address(hop)
            if address is None:
                break
            client = address
            if not self.trusts(address):
                break
        return str(client)

    def scheme(self, peer: str, forwarded_proto: Sequence[str]) -> str | None:
        """The scheme a trusted proxy says the client used (its right-most X-Forwarded-Proto),
        or None to keep the connection's own."""
        peer_address = parse_address(peer)
        if not forwarded_proto or peer_address is None or not self.trusts(peer_address):
            return None
        said = forwarded_proto[-1].split(",")[-1].strip().lower()
        return said if said in SCHEMES else None
