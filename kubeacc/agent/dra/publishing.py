"""Which devices the DRA driver publishes in its ResourceSlices (``--dra-publish``).

kube-scheduler pays for every device a node publishes on every pod it places: each Filter call
of its DRA plugin gathers and converts every slice that targets the node, whatever the pool or
slice the devices sit in, before it looks for a device (Kubernetes 1.37's structured
allocator). Putting devices in pools or slices of their own therefore saves the scheduler
nothing; not publishing them does. SR-IOV virtual functions are most of a NIC-rich node's
devices (a ``dgx-h100`` has 8 GPUs, 8 NICs and 64 VFs) and cost kube-scheduler 1.4-1.7x the CPU
per pod of minimal GPU slices, against 1.1-1.3x for the GPUs and NICs alone (docs/benchmarks.md),
so they are published only on request; every device type is published unless a list is given
(NICs too: GPU-NIC alignment by ``matchAttribute`` needs them).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from kubeacc.model import DeviceType, Inventory

#: The ``--dra-publish`` kind of SR-IOV virtual functions (of the NICs that are published).
VF = "vf"
#: Every kind ``--dra-publish`` takes, in the order the help lists them.
KINDS: tuple[str, ...] = (*(t.value for t in DeviceType), VF)


@dataclass(frozen=True)
class Publishing:
    """The device types whose devices are published, and whether NICs' VFs are too."""

    types: frozenset[DeviceType] = frozenset(DeviceType)
    vfs: bool = False

    @classmethod
    def parse(cls, kinds: Iterable[str]) -> Publishing:
        """From ``--dra-publish`` values; none: the default (every type, no VFs).

        Raises ValueError on an unknown kind, or on ``vf`` without ``nic`` (a VF is published
        beside its NIC, which carries the attributes its VFs are selected with)."""
        given = list(kinds)
        if not given:
            return cls()
        unknown = sorted({k for k in given if k not in KINDS})
        if unknown:
            raise ValueError(
                f"--dra-publish: unknown kind {', '.join(unknown)} (one of {', '.join(KINDS)})"
            )
        types = frozenset(DeviceType(k) for k in given if k != VF)
        vfs = VF in given
        if vfs and DeviceType.NIC not in types:
            raise ValueError("--dra-publish vf needs --dra-publish nic: VFs go with their NICs")
        return cls(types=types, vfs=vfs)

    def keep(self, inv: Inventory) -> Inventory:
        """``inv`` without the devices of types that are not published."""
        if self.types >= frozenset(d.type for d in inv.devices):
            return inv
        return inv.replace(devices=[d for d in inv.devices if d.type in self.types])
