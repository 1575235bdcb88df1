"""A real-runtime node's network: its own network namespace, linked to the machine by one veth.

On a real node the kubelet, containerd, hostNetwork pods and the CNI bridge share the host's
network namespace. The testbed gives every real-runtime node a namespace of its own
(``ip netns add kubeacc-<id>``) that plays that role:

* containerd and the kubelet run in it (``nsenter --net``), so hostNetwork pods share the
  kubelet's network, and the kubelet's probes reach pods directly (hostNetwork pods on the
  node's address, bridged pods through the CNI bridge that lives here too);
* ``eth0`` in it is one end of a veth pair; the other end (``kb<id>``) stays on the machine.
  Both get an address from a /30 in 10.89.0.0/16: the node's address (``--node-ip``, where the
  kubelet's API and healthz listen, so tests on the machine reach them) and the machine's.
  Nothing else is routed: no default route, no forwarding to the machine's interfaces, so no
  pod traffic leaves the machine;
* the ``kubernetes`` Service's ClusterIP sits on the namespace's loopback device, where
  kubeacc.testbed.apiproxy listens and forwards to the API server on the machine's 127.0.0.1 —
  the kubelet's own kubeconfig and every in-cluster client use it.

The namespace outlives containerd and kubelet restarts; deleting it removes the veth pair.
"""

from __future__ import annotations

import ipaddress
import subprocess
from pathlib import Path

#: Node links come from this range, one /30 each.
LINK_RANGE = ipaddress.IPv4Network("10.89.0.0/16")


class NodeNetworkError(RuntimeError):
    """The node's network could not be set up (no ip(8), no CAP_NET_ADMIN)."""


def _ip(*args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
    done = subprocess.run(["ip", *args], capture_output=True, text=True, check=False, timeout=30)
    if check and done.returncode != 0:
        raise NodeNetworkError(f"ip {' '.join(args)}: {done.stderr.strip()}")
    return done


class NodeNetwork:
    """One node's network namespace and its link to the machine (see the module doc)."""

    def __init__(self, digest: str, service_ip: str) -> None:
        #: ``ip netns`` name.
        self.netns = f"kubeacc-{digest}"
        #: The machine's end of the veth pair.
        self.host_link = f"kb{digest[:8]}"
        self.service_ip = service_ip
        self._slot = int(digest, 16) % (LINK_RANGE.num_addresses // 4)
        self._subnet: ipaddress.IPv4Network | None = None
        self._made = False

    @property
    def path(self) -> Path:
        return Path("/run/netns", self.netns)

    @property
    def subnet(self) -> ipaddress.IPv4Network:
        """The link's /30, chosen once: the first one from this node's slot on that no address
        of the machine lies in (other testbeds' nodes may use some)."""
        if self._subnet is None:
            used = _ip("-4", "-o", "addr", "show").stdout
            for i in range(LINK_RANGE.num_addresses // 4):
                slot = (self._slot + i) % (LINK_RANGE.num_addresses // 4)
                net = ipaddress.IPv4Network(f"{LINK_RANGE.network_address + 4 * slot}/30")
                if all(f" {a}/" not in used for a in net.hosts()):
                    self._subnet = net
                    break
            else:
                raise NodeNetworkError(f"no free /30 in {LINK_RANGE}")
        assert self._subnet is not None
        return self._subnet

    @property
    def node_ip(self) -> str:
        return str(self.subnet.network_address + 2)

    @property
    def host_ip(self) -> str:
        return str(self.subnet.network_address + 1)

    def enter(self) -> list[str]:
        """The argv prefix that runs a command in the node's network namespace."""
        return ["nsenter", f"--net={self.path}", "--"]

    def ensure(self) -> None:
        """Create the namespace and its link (once); idempotent. What a killed earlier run on
        the same directory left behind is deleted first."""
        if not self._made:
            self.delete()
            self._made = True
        if not self.path.exists():
            _ip("netns", "add", self.netns)
        ns = ["-n", self.netns]
        _ip(*ns, "link", "set", "lo", "up")
        if f" {self.service_ip}/" not in _ip(*ns, "-4", "-o", "addr", "show", "dev", "lo").stdout:
            _ip(*ns, "addr", "add", f"{self.service_ip}/32", "dev", "lo")
        if _ip("link", "show", self.host_link, check=False).returncode != 0:
            _ip(
                "link", "add", self.host_link, "type", "veth",
                "peer", "name", "eth0", "netns", self.netns,
            )  # fmt: skip
            prefix = self.subnet.prefixlen
            _ip("addr", "add", f"{self.host_ip}/{prefix}", "dev", self.host_link)
            _ip(*ns, "addr", "add", f"{self.node_ip}/{prefix}", "dev", "eth0")
            _ip("link", "set", self.host_link, "up")
            _ip(*ns, "link", "set", "eth0", "up")

    def delete(self) -> None:
        """Delete the namespace (the veth pair goes with it)."""
        _ip("netns", "delete", self.netns, check=False)
        _ip("link", "delete", self.host_link, check=False)
