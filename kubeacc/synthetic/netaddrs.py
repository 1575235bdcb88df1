"""Interface addresses of a synthetic host, in the host's initial network namespace.

A real kernel gives a network namespace's addresses only through netlink; the files nearest to it
are ``/proc/<pid>/net/if_inet6`` (IPv6 addresses per interface), ``/proc/<pid>/net/fib_trie``
(IPv4 addresses among the routing table's entries, ``/32 host LOCAL``) and ``/proc/<pid>/net/route``
(the IPv4 routes with their interface). PID 1 is the host's init, so its ``net`` is the host's
namespace whatever namespace the reader runs in. This writes those three files in the kernel's
formats for the interfaces given addresses.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Sequence
from dataclasses import dataclass

from kubeacc.synthetic.fsw import TreeWriter

NET_DIR = "/proc/1/net"
_ROUTE_HEADER = (
    "Iface\tDestination\tGateway \tFlags\tRefCnt\tUse\tMetric\tMask\t\tMTU\tWindow\tIRTT"
)
_RTF_UP = 0x1
_IFA_F_PERMANENT = 0x80
_SCOPE_GLOBAL = 0x00


@dataclass(frozen=True)
class Address:
    """One address (CIDR) of one interface."""

    ifname: str
    ifindex: int
    cidr: str


def _hex32(addr: ipaddress.IPv4Address) -> str:
    """An IPv4 address as ``/proc/net/route`` prints it: the network-order word in host order."""
    return f"{int.from_bytes(addr.packed, sys.byteorder):08X}"


def _route(addrs: Sequence[Address]) -> str:
    lines = [_ROUTE_HEADER]
    for a in addrs:
        iface = ipaddress.ip_interface(a.cidr)
        if iface.version != 4:
            continue
        net = iface.network
        lines.append(
            f"{a.ifname}\t{_hex32(net.network_address)}\t00000000\t{_RTF_UP:04X}\t0\t0\t0\t"
            f"{_hex32(net.netmask)}\t0\t0\t0"
        )
    return "\n".join(lines) + "\n"


def _fib_trie(addrs: Sequence[Address]) -> str:
    out = ["Main:", "  +-- 0.0.0.0/0 2 0 2"]
    for a in addrs:
        iface = ipaddress.ip_interface(a.cidr)
        if iface.version != 4:
            continue
        net = iface.network
        out += [
            f"     +-- {net} 2 0 2",
            f"        |-- {net.network_address}",
            f"           /{net.prefixlen} link UNICAST",
            f"        |-- {iface.ip}",
            "           /32 host LOCAL",
        ]
    return "\n".join(out) + "\n"


def _if_inet6(addrs: Sequence[Address]) -> str:
    lines = []
    for a in addrs:
        iface = ipaddress.ip_interface(a.cidr)
        if iface.version != 6:
            continue
        lines.append(
            f"{iface.ip.packed.hex()} {a.ifindex:02x} {iface.network.prefixlen:02x} "
            f"{_SCOPE_GLOBAL:02x} {_IFA_F_PERMANENT:02x} {a.ifname:>8}"
        )
    return "".join(line + "\n" for line in lines)


def write_addresses(w: TreeWriter, addrs: Sequence[Address]) -> None:
    """(Re)write the host's address files for ``addrs`` (all of them, every time)."""
    w.write(f"{NET_DIR}/route", _route(addrs))
    w.write(f"{NET_DIR}/fib_trie", _fib_trie(addrs))
    w.write(f"{NET_DIR}/if_inet6", _if_inet6(addrs))
