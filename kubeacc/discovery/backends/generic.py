"""Processing accelerators (PCI class 0x12) that no vendor backend knows: type ``accelerator``."""

from __future__ import annotations

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.model import Device, DeviceType, Health, HealthState

PROCESSING_ACCELERATOR_CLASS = 0x12


class GenericAcceleratorBackend:
    name = "generic"

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        found = []
        for fn in list(ctx.unclaimed()):
            if fn.base_class != PROCESSING_ACCELERATOR_CLASS or fn.physfn is not None:
                continue
            name = ctx.claim(fn, DeviceType.ACCELERATOR)
            dev = ctx.pci_device(fn, DeviceType.ACCELERATOR, name, source="pci-class")
            if fn.driver is None:
                dev.health = Health(state=HealthState.UNHEALTHY, reason="no kernel driver bound")
            found.append(dev)
        return found
