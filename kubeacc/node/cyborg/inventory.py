"""The node's devices as Cyborg knows them, as kube-acc's :class:`~kubeacc.model.Inventory`.

Cyborg reports each compute host's accelerators as deployables, each also a resource provider in
Placement under the host's own provider (the one named after the host), with an inventory of one
resource class (``FPGA``, ``PGPU``, ``CUSTOM_...``) and traits. Every unit of that inventory is
one device here, ``cyborg-<first 8 of the provider's UUID>-<n>``: the units of a deployable are
interchangeable (Cyborg picks the attach handle at bind), so a claim is given a count of them.

A unit that something other than kube-acc holds (an allocation in Placement by a consumer that
is not one of this node's claims: a Nova server, an ARQ bound by hand) is not published, so no
pod is offered it: the highest-numbered free units are left out first, those a claim of this
node holds are always kept.

Vendor, model and health come from the host's Cyborg device when it has just one (the v2 API
does not say which device a deployable belongs to); with several, from the deployable alone.
"""

from __future__ import annotations

import json
import threading
from dataclasses import dataclass

from kubeacc.model import (
    Device,
    DeviceType,
    FPGADriver,
    FPGAState,
    Health,
    HealthState,
    Inventory,
)
from kubeacc.node.cyborg.client import CyborgClient, CyborgError
from kubeacc.node.cyborg.records import Records

SOURCE = "cyborg"
_GPU_CLASSES = frozenset({"PGPU", "VGPU"})
#: Cyborg's Intel FPGA driver's traits: the AFU loaded, and the FIM (the PR region's interface).
FUNCTION_TRAIT = "CUSTOM_FPGA_FUNCTION_ID_INTEL_"
REGION_TRAIT = "CUSTOM_FPGA_REGION_INTEL_"
#: Cyborg's FPGA drivers (a deployable's ``driver_name``) -> the layout kube-acc knows them by.
_FPGA_DRIVERS = {"intel": FPGADriver.OPAE, "xilinx": FPGADriver.XILINX}


def deployable_traits(dep: dict[str, object]) -> list[str]:
    """The trait attributes of a deployable as Cyborg's v2 API lists them."""
    try:
        attrs = json.loads(str(dep.get("attributes_list") or "[]"))
    except ValueError:
        return []
    if not isinstance(attrs, list):
        return []
    return [
        str(v)
        for a in attrs
        if isinstance(a, dict)
        for k, v in a.items()
        if str(k).startswith("trait")
    ]


def trait_id(traits: list[str], prefix: str) -> str | None:
    """The lower-case ID of the first trait with ``prefix``."""
    for t in traits:
        if t.startswith(prefix):
            return t[len(prefix) :].lower()
    return None


def fpga_state(dep: dict[str, object]) -> FPGAState | None:
    """An FPGA deployable's FIM and AFU as Cyborg's driver reports them (None: not a driver
    kube-acc knows the layout of)."""
    driver = _FPGA_DRIVERS.get(str(dep.get("driver_name") or ""))
    if driver is None:
        return None
    traits = deployable_traits(dep)
    return FPGAState(
        driver=driver,
        interface_id=trait_id(traits, REGION_TRAIT),
        afu_id=trait_id(traits, FUNCTION_TRAIT),
    )


@dataclass(frozen=True)
class Slot:
    """One published unit of a deployable."""

    name: str
    rp_uuid: str
    resource_class: str
    traits: tuple[str, ...]
    deployable: str


def device_type(resource_class: str) -> DeviceType:
    if resource_class == "FPGA":
        return DeviceType.FPGA
    if resource_class in _GPU_CLASSES:
        return DeviceType.GPU
    return DeviceType.ACCELERATOR


def slot_name(rp_uuid: str, n: int) -> str:
    return f"cyborg-{rp_uuid[:8]}-{n}"


def _text(value: object, default: str = "") -> str:
    return str(value) if isinstance(value, str) and value else default


class CyborgInventory:
    """Reads the node's deployables from Cyborg and Placement; remembers the last slots."""

    def __init__(
        self,
        client: CyborgClient,
        node: str,
        records: Records | None,
        *,
        every_unit: bool = False,
    ) -> None:
        self.client = client
        self.node = node
        self.records = records
        #: publish the units others hold too (the life-cycle agent's Accelerators: a device is
        #: there whoever holds it; Placement says who does when an operation asks)
        self.every_unit = every_unit
        self._slots: dict[str, Slot] = {}
        self._lock = threading.Lock()

    def slot(self, name: str) -> Slot | None:
        with self._lock:
            return self._slots.get(name)

    def discover(self) -> Inventory:
        """The node's devices now; :class:`CyborgError` when Cyborg or Placement did not answer
        whole (the caller keeps its last good inventory)."""
        roots = self.client.providers(name=self.node)
        if len(roots) != 1:
            raise CyborgError(
                f"Placement has no resource provider named {self.node!r} (the compute host "
                "Cyborg reports this node's devices under)"
            )
        root = roots[0]["uuid"]
        children = {
            rp["name"]: rp for rp in self.client.providers(in_tree=root) if rp["uuid"] != root
        }
        deployables = [d for d in self.client.deployables() if d.get("name") in children]
        devices = [d for d in self.client.devices() if d.get("hostname") == self.node]
        records = self.records.all() if self.records is not None else []
        held: dict[str, set[str]] = {}
        for rec in records:
            for name, rp in rec.devices.items():
                held.setdefault(rp, set()).add(name)
        consumers = {rec.uid for rec in records}
        found: list[Device] = []
        slots: dict[str, Slot] = {}
        for dep in sorted(deployables, key=lambda d: str(d["name"])):
            rp_uuid = str(children[dep["name"]]["uuid"])
            got = self._deployable(dep, rp_uuid, devices, held.get(rp_uuid, set()), consumers)
            for dev, slot in got:
                found.append(dev)
                slots[slot.name] = slot
        counters: dict[DeviceType, int] = {}
        for dev in found:
            dev.index = counters.get(dev.type, 0)
            counters[dev.type] = dev.index + 1
        with self._lock:
            self._slots = slots
        return Inventory(hostname=self.node, devices=found)

    def _deployable(
        self,
        dep: dict[str, object],
        rp_uuid: str,
        devices: list[dict[str, object]],
        ours: set[str],
        consumers: set[str],
    ) -> list[tuple[Device, Slot]]:
        """The published slots of one deployable (``ours``: those this node's claims hold;
        ``consumers``: the claims kube-acc allocated for)."""
        inventories = self.client.inventories(rp_uuid)
        if len(inventories) != 1:
            return []  # not one resource class: nothing kube-acc can count in units
        rc, inv = next(iter(inventories.items()))
        total = int(inv.get("total", 0)) - int(inv.get("reserved", 0))
        traits = tuple(sorted(self.client.traits(rp_uuid)))
        outside = sum(
            int(alloc.get("resources", {}).get(rc, 0))
            for consumer, alloc in self.client.provider_allocations(rp_uuid).items()
            if consumer not in consumers
        )
        names = [slot_name(rp_uuid, n) for n in range(max(total, 0))]
        free = [n for n in names if n not in ours]
        keep = len(free) if self.every_unit else max(len(free) - outside, 0)
        published = [n for n in names if n in ours or n in free[:keep]]
        one = devices[0] if len(devices) == 1 else {}
        status = _text(one.get("status"), "enabled")
        health = (
            Health()
            if status == "enabled"
            else Health(state=HealthState.UNHEALTHY, reason=f"Cyborg device status {status}")
        )
        out = []
        for n, name in enumerate(published):
            slot = Slot(name, rp_uuid, rc, traits, str(dep.get("uuid", "")))
            dev = Device(
                name=name,
                type=device_type(rc),
                vendor=_text(one.get("vendor"), "unknown"),
                model=_text(one.get("model"), _text(dep.get("driver_name"), "unknown")),
                index=n,
                source=SOURCE,
                health=health,
                fpga=fpga_state(dep) if device_type(rc) is DeviceType.FPGA else None,
                attributes={
                    "cyborgDeployable": slot.deployable,
                    "resourceProvider": rp_uuid,
                    "resourceClass": rc,
                    "traits": ",".join(traits),
                },
            )
            out.append((dev, slot))
        return out
