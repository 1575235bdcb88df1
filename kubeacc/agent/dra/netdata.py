"""``networkData`` of a prepared NIC or virtual function: interface name, hardware address, IPs.

Read through the host seam at prepare, so the values are the interface's at that moment:

* ``hardwareAddress``: ``/sys/class/net/<ifname>/address`` (six octets for Ethernet, twenty for
  IPoIB, as the kernel prints them);
* ``ips`` (CIDR), only for a whole NIC: its interface stays in the host's network namespace (the
  pod gets its RDMA devices, whose RoCE/IPoIB addressing is the interface's), so the host's
  addresses are the ones its traffic uses. They are read from the files of the host's init
  process (``/proc/1/net``), whatever namespace the agent runs in: IPv6 from ``if_inet6``; IPv4
  from ``fib_trie`` (the ``/32 host LOCAL`` entries) matched to the connected route of
  ``route`` that holds them, which gives the interface and the prefix length. The kernel gives
  the IPv4 addresses per interface only through netlink; when two interfaces share a subnet the
  route file cannot tell them apart, and the address goes to neither (left out, never guessed).
* A virtual function gets **no** ``ips``: it is handed to a pod whose network plugin moves its
  interface into the pod's namespace and addresses it there, after prepare and out of this
  driver's sight. Any address it has on the host at prepare is not the pod's.
"""

from __future__ import annotations

import ipaddress
import sys
from collections.abc import Callable
from typing import Any

from kubeacc.host import Host
from kubeacc.host.files import HostRoot

NET_DIR = "/proc/1/net"
#: fib_trie lists every route of every table: allow more than one page of them.
_PROC_LIMIT = 1 << 20
_RTF_GATEWAY = 0x2
#: The DRA API's limits: at most 16 IPs, a hardware address of at most 128 characters.
MAX_IPS = 16
MAX_HW_ADDRESS = 128


def hardware_address(files: HostRoot, ifname: str) -> str:
    addr = files.read_text(f"/sys/class/net/{ifname}/address", ifname, required=False) or ""
    return addr if len(addr) <= MAX_HW_ADDRESS else ""


def ipv6_addresses(files: HostRoot, ifname: str) -> list[str]:
    """The interface's IPv6 addresses (CIDR) from ``if_inet6``, link-local ones left out."""
    text = files.read_text(f"{NET_DIR}/if_inet6", ifname, required=False, limit=_PROC_LIMIT)
    out = []
    for line in (text or "").splitlines():
        fields = line.split()
        if len(fields) != 6 or fields[5] != ifname:
            continue
        try:
            addr = ipaddress.IPv6Address(bytes.fromhex(fields[0]))
            prefix = int(fields[2], 16)
        except ValueError:
            continue
        if not addr.is_link_local:
            out.append(f"{addr}/{prefix}")
    return out


def _local_ipv4(fib_trie: str) -> list[ipaddress.IPv4Address]:
    """The host's own IPv4 addresses: the leaves followed by a ``/32 host LOCAL`` entry."""
    out: list[ipaddress.IPv4Address] = []
    leaf: ipaddress.IPv4Address | None = None
    for line in fib_trie.splitlines():
        text = line.strip()
        if text.startswith("|--"):
            try:
                leaf = ipaddress.IPv4Address(text[3:].strip())
            except ValueError:
                leaf = None
        elif leaf is not None and leaf not in out and text.split()[:3] == ["/32", "host", "LOCAL"]:
            out.append(leaf)
    return out


def _word(hex_word: str) -> ipaddress.IPv4Address:
    """A ``/proc/net/route`` address: the network-order word printed in host order."""
    return ipaddress.IPv4Address(int(hex_word, 16).to_bytes(4, sys.byteorder))


def _connected(route: str) -> list[tuple[str, ipaddress.IPv4Network]]:
    """(interface, subnet) of each route without a gateway: the subnets on the interfaces."""
    out = []
    for line in route.splitlines()[1:]:
        f = line.split()
        if len(f) < 8:
            continue
        try:
            if int(f[3], 16) & _RTF_GATEWAY or int(f[2], 16) != 0:
                continue
            net = ipaddress.IPv4Network(f"{_word(f[1])}/{_word(f[7])}")
        except ValueError:
            continue
        if net.prefixlen > 0:
            out.append((f[0], net))
    return out


def ipv4_addresses(files: HostRoot, ifname: str) -> list[str]:
    """The interface's IPv4 addresses (CIDR): each local address whose longest connected route
    is on ``ifname`` alone."""
    trie = files.read_text(f"{NET_DIR}/fib_trie", ifname, required=False, limit=_PROC_LIMIT)
    route = files.read_text(f"{NET_DIR}/route", ifname, required=False, limit=_PROC_LIMIT)
    if not trie or not route:
        return []
    subnets = _connected(route)
    out = []
    for addr in _local_ipv4(trie):
        holding = [(i, n) for i, n in subnets if addr in n]
        if not holding:
            continue
        longest = max(n.prefixlen for _, n in holding)
        owners = {i for i, n in holding if n.prefixlen == longest}
        if owners == {ifname}:
            out.append(f"{addr}/{longest}")
    return out


def network_data(files: HostRoot, ifname: str, with_ips: bool) -> dict[str, Any]:
    """The ``networkData`` of one interface (``with_ips``: a whole NIC's, see above)."""
    data: dict[str, Any] = {"interfaceName": ifname}
    if hw := hardware_address(files, ifname):
        data["hardwareAddress"] = hw
    if with_ips:
        ips = [*ipv4_addresses(files, ifname), *ipv6_addresses(files, ifname)][:MAX_IPS]
        if ips:
            data["ips"] = ips
    return data


def host_reader(host: Host) -> Callable[[str, bool], dict[str, Any]]:
    """:func:`network_data` on ``host``'s files as they are at each call."""
    return lambda ifname, with_ips: network_data(host.files(), ifname, with_ips)
