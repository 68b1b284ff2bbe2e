"""This machine's interface addresses as the egress policy reads them (netlink), checked
against the kernel's text views of the same lists; and how long a reading is kept."""

from __future__ import annotations

import ipaddress
import sys
from pathlib import Path

import pytest

from qexport.net.egress import EgressPolicy, EgressRefusedError
from qexport.net.host_addresses import IPAddress, OwnAddresses, netlink_addresses

linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="netlink: Linux")


def _if_inet6() -> set[IPAddress]:
    """IPv6 addresses from /proc/net/if_inet6 (32 hex digits, then the index, ...)."""
    path = Path("/proc/net/if_inet6")
    if not path.exists():
        return set()
    return {
        ipaddress.IPv6Address(bytes.fromhex(line.split()[0]))
        for line in path.read_text().splitlines()
        if line.strip()
    }


def _fib_trie_local() -> set[IPAddress]:
    """IPv4 addresses /proc/net/fib_trie marks `/32 host LOCAL` (an interface's own)."""
    found: set[IPAddress] = set()
    leaf = None
    for line in Path("/proc/net/fib_trie").read_text().splitlines():
        text = line.strip()
        if text.startswith("|--"):
            leaf = text.split()[1]
        elif leaf is not None and text.startswith("/32 host LOCAL"):
            found.add(ipaddress.IPv4Address(leaf))
    return found


@linux_only
def test_netlink_reads_every_address_of_every_interface() -> None:
    """Loopback is there in both families (when IPv6 is on), the IPv6 addresses are exactly
    those /proc/net/if_inet6 lists, and every IPv4 address fib_trie marks as local is there
    (an interface that is down keeps its address but not its local route); each with its
    interface's name."""
    found = netlink_addresses()
    assert found[ipaddress.ip_address("127.0.0.1")] == "lo"
    six = _if_inet6()
    if six:
        assert found[ipaddress.ip_address("::1")] == "lo"
    assert {a for a in found if a.version == 6} == six
    assert _fib_trie_local() <= {a for a in found if a.version == 4}
    assert all(name for name in found.values())


@linux_only
def test_the_default_policy_refuses_every_address_of_this_machine() -> None:
    """Whatever this machine's addresses are (public ones included), none is a destination
    a member may name."""
    policy = EgressPolicy()
    for address in netlink_addresses():
        with pytest.raises(EgressRefusedError):
            policy.check_address(address)


def test_a_reading_is_kept_ten_seconds_and_netlink_missing_falls_back_to_the_name() -> None:
    """The kernel is asked once per 10 s however many checks run; where netlink cannot be
    read, the addresses of the machine's name stand in."""
    now = [0.0]
    reads: list[float] = []
    public = ipaddress.ip_address("93.184.216.34")

    def read() -> dict[IPAddress, str]:
        reads.append(now[0])
        return {public: "eth0"}

    own = OwnAddresses(read, monotonic=lambda: now[0])
    assert own() == {public: "eth0"}
    now[0] = 9.9
    own()
    now[0] = 10.0
    own()
    assert reads == [0.0, 10.0]

    def refused() -> dict[IPAddress, str]:
        raise OSError("no netlink on this system")

    fallback = OwnAddresses(refused, monotonic=lambda: now[0])
    assert all(name == "the host's name" for name in fallback().values())
