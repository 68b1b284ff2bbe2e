"""The addresses of this machine's own interfaces, which the egress policy refuses.

A webhook sent to the machine's own public or private address reaches every service that
listens on all interfaces (a database, an admin port, the metrics of a sidecar) as surely as
127.0.0.1 does, and no range table can know that address. So the policy asks the kernel.

How the addresses are read, weighed:
- netlink (an RTM_GETADDR dump on an AF_NETLINK socket), chosen on Linux: the kernel's own
  list, IPv4 and IPv6, secondary addresses included, in one round trip of a few hundred
  bytes per address (0.05 ms for this machine's 5), no text to parse and nothing to install.
- /proc/net/fib_trie (IPv4) with /proc/net/if_inet6 (IPv6): text formats, and fib_trie
  prints the whole routing table, megabytes on a host that carries a full BGP table.
- `ip -j addr`: a process per refresh (3 ms), and iproute2 is missing from slim images.
- socket.if_nameindex with the SIOCGIFADDR ioctl: IPv4 only, one address per interface
  (secondary addresses and aliases missed).
- psutil.net_if_addrs: a dependency the service does not otherwise have.
Where netlink is missing or refused (macOS, some sandboxes), the addresses the machine's own
name resolves to stand in: a partial list, logged once.

The list is kept for REFRESH_SECONDS: an address added to an interface is refused within
10 s, and a burst of deliveries asks the kernel once.
"""

from __future__ import annotations

import ipaddress
import socket
import struct
import threading
import time
from collections.abc import Callable, Mapping

import structlog

log = structlog.get_logger()

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

REFRESH_SECONDS = 10.0

# linux/netlink.h, linux/rtnetlink.h, linux/if_addr.h
_NLMSG_HEADER = struct.Struct("=IHHII")  # length, type, flags, sequence, port id
_IFADDRMSG = struct.Struct("=BBBBI")  # family, prefix length, flags, scope, interface index
_RTATTR = struct.Struct("=HH")  # length, type
_NLMSG_ERROR, _NLMSG_DONE = 2, 3
_RTM_NEWADDR, _RTM_GETADDR = 20, 22
_NLM_F_REQUEST, _NLM_F_DUMP = 0x1, 0x300
_IFA_ADDRESS, _IFA_LOCAL = 1, 2
_FAMILIES = {socket.AF_INET: 4, socket.AF_INET6: 16}
_SEQUENCE = 1


def _aligned(length: int) -> int:
    return (length + 3) & ~3


def _interface_name(index: int) -> str:
    try:
        return socket.if_indextoname(index)
    except OSError:  # gone since the dump
        return f"interface {index}"


def parse_addresses(data: bytes) -> tuple[dict[IPAddress, str], bool]:
    """The addresses (with their interface's name) in a buffer of RTM_NEWADDR messages, and
    whether the dump's end (NLMSG_DONE) was in it; OSError for an error message."""
    found: dict[IPAddress, str] = {}
    offset = 0
    while offset + _NLMSG_HEADER.size <= len(data):
        length, kind, _flags, _seq, _port = _NLMSG_HEADER.unpack_from(data, offset)
        if length < _NLMSG_HEADER.size or offset + length > len(data):
            raise OSError("a truncated netlink message")
        body = offset + _NLMSG_HEADER.size
        if kind == _NLMSG_DONE:
            return found, True
        if kind == _NLMSG_ERROR:
            (code,) = struct.unpack_from("=i", data, body)
            if code:
                raise OSError(-code, "netlink refused the address dump")
        elif kind == _RTM_NEWADDR:
            family, _prefix, _flags, _scope, index = _IFADDRMSG.unpack_from(data, body)
            attributes = _attributes(data, body + _IFADDRMSG.size, offset + length)
            # A point-to-point IPv4 interface gives its own address as IFA_LOCAL and its
            # peer's as IFA_ADDRESS; everywhere else IFA_ADDRESS is the interface's own.
            raw = attributes.get(_IFA_LOCAL) or attributes.get(_IFA_ADDRESS)
            if family in _FAMILIES and raw is not None and len(raw) == _FAMILIES[family]:
                found[ipaddress.ip_address(raw)] = _interface_name(index)
        offset += _aligned(length)
    return found, False


def _attributes(data: bytes, start: int, end: int) -> dict[int, bytes]:
    attributes: dict[int, bytes] = {}
    while start + _RTATTR.size <= end:
        length, kind = _RTATTR.unpack_from(data, start)
        if length < _RTATTR.size:
            break
        attributes[kind] = data[start + _RTATTR.size : start + length]
        start += _aligned(length)
    return attributes


def netlink_addresses() -> dict[IPAddress, str]:
    """Every address of every interface, from the kernel (Linux); OSError elsewhere."""
    family = getattr(socket, "AF_NETLINK", None)
    if family is None:
        raise OSError("no netlink on this system")
    request = _NLMSG_HEADER.pack(
        _NLMSG_HEADER.size + _IFADDRMSG.size,
        _RTM_GETADDR,
        _NLM_F_REQUEST | _NLM_F_DUMP,
        _SEQUENCE,
        0,
    ) + _IFADDRMSG.pack(socket.AF_UNSPEC, 0, 0, 0, 0)
    found: dict[IPAddress, str] = {}
    with socket.socket(family, socket.SOCK_RAW, socket.NETLINK_ROUTE) as sock:
        sock.settimeout(2.0)
        sock.bind((0, 0))
        sock.send(request)
        done = False
        while not done:
            part, done = parse_addresses(sock.recv(1 << 16))
            found.update(part)
    return found


def named_addresses() -> dict[IPAddress, str]:
    """The addresses this machine's name resolves to (a partial stand-in for netlink)."""
    found: dict[IPAddress, str] = {}
    try:
        infos = socket.getaddrinfo(socket.gethostname(), None, proto=socket.IPPROTO_TCP)
    except OSError:
        return found
    for info in infos:
        found[ipaddress.ip_address(str(info[4][0]).split("%", 1)[0])] = "the host's name"
    return found


class OwnAddresses:
    """This machine's interface addresses, read at most every `refresh` seconds; callable."""

    def __init__(
        self,
        read: Callable[[], dict[IPAddress, str]] = netlink_addresses,
        *,
        refresh: float = REFRESH_SECONDS,
        monotonic: Callable[[], float] = time.monotonic,
    ) -> None:
        self._read = read
        self._refresh = refresh
        self._monotonic = monotonic
        self._lock = threading.Lock()
        self._found: Mapping[IPAddress, str] = {}
        self._read_at: float | None = None
        self._fell_back = False

    def __call__(self) -> Mapping[IPAddress, str]:
        with self._lock:
            now = self._monotonic()
            if self._read_at is None or now - self._read_at >= self._refresh:
                self._found = self._fresh()
                self._read_at = now
            return self._found

    def _fresh(self) -> Mapping[IPAddress, str]:
        try:
            return self._read()
        except OSError as exc:
            if not self._fell_back:
                self._fell_back = True
                log.warning(
                    "own_addresses_partial",
                    reason=str(exc),
                    using="the addresses of the machine's name",
                )
            return named_addresses()


own_addresses = OwnAddresses()
