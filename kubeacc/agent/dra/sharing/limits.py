"""Memory-shared GPUs: which GPUs are shared, how they are published, what a share's limits are.

A memory-shared GPU is published with ``allowMultipleAllocations: true`` and two consumable
capacities, each with a ``requestPolicy``:

* ``kubeacc.io/memory`` (bytes): a claim names the memory it needs
  (``capacity.requests``), at least :data:`MEMORY_MIN`, rounded up to whole MiB; a claim that
  names none gets all of it (the GPU to itself);
* ``kubeacc.io/cores`` (percent of the GPU's compute, 100 in all): a claim that names none
  reserves none and is not limited.

The scheduler keeps the sum of the shares within the capacities. Each allocated share carries a
``shareID`` and its ``consumedCapacity``; prepare turns those into the limits of the container's
environment (the sharing contract of DESIGN.md; docs/sharing.md says who enforces them).
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from fractions import Fraction
from typing import Protocol

from kubeacc.engine.quantity import QuantityError, parse_quantity
from kubeacc.model import Device, DeviceType, PartitionKind

MEMORY = "kubeacc.io/memory"
CORES = "kubeacc.io/cores"
MIB = 1 << 20
#: The smallest memory share a claim can get (smaller requests are rounded up to it).
MEMORY_MIN_MIB = 256
#: All of a GPU's compute, in percent.
CORES_TOTAL = 100

#: Environment of a share (DESIGN.md, "Sharing contract").
ENV_MEMORY = "KUBEACC_DEVICE_MEMORY_LIMIT"
ENV_CORES = "KUBEACC_DEVICE_CORES_LIMIT"
ENV_MPS_MEMORY = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
ENV_MPS_CORES = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"

_KEYS = ("type", "model", "pci", "name")
#: Types a broad selector (``all``, ``model=``) shares; others only when named explicitly
#: (``type=fpga``, ``pci=``/``name=`` of the device, or a policy that lists the type).
SHAREABLE_TYPES = frozenset({DeviceType.GPU, DeviceType.XPU})
_SHARE_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]{0,63}")


class SelectorError(ValueError):
    """A ``--memory-shared`` value that is not a selector."""


@dataclass(frozen=True)
class ShareSelector:
    """``all``, ``type=TYPE``, ``model=GLOB`` (case-insensitive), ``pci=BUS-ID`` or
    ``name=DEVICE``."""

    key: str
    value: str = ""

    @classmethod
    def parse(cls, text: str) -> ShareSelector:
        text = text.strip()
        if text == "all":
            return cls("all")
        key, sep, value = text.partition("=")
        key, value = key.strip(), value.strip()
        types = {t.value for t in DeviceType}
        if not sep or key not in _KEYS or not value or (key == "type" and value not in types):
            raise SelectorError(
                f"memory-shared selector {text!r}: expected all, type=TYPE, model=GLOB, "
                "pci=BUS-ID or name=DEVICE"
            )
        return cls(key, value)

    def matches(self, dev: Device) -> bool:
        if self.key == "all":
            return True
        if self.key == "model":
            return fnmatch.fnmatchcase(dev.model.lower(), self.value.lower())
        if self.key == "type":
            return dev.type.value == self.value
        if self.key == "pci":
            return dev.pci is not None and dev.pci.bus_id.lower() == self.value.lower()
        return dev.name == self.value

    def explicit(self, dev: Device) -> bool:
        """Whether the selector names this device or its type (not only ``all``/``model=``)."""
        return self.key in ("type", "pci", "name") and self.matches(dev)

    def __str__(self) -> str:
        return self.key if self.key == "all" else f"{self.key}={self.value}"


def parse_selectors(texts: Iterable[str]) -> tuple[ShareSelector, ...]:
    return tuple(ShareSelector.parse(t) for t in texts)


class Selector(Protocol):
    """What chooses memory-shared devices: a ``--memory-shared`` selector or a policy."""

    def matches(self, dev: Device) -> bool: ...

    def explicit(self, dev: Device) -> bool: ...


def shareable(dev: Device, explicit: bool = False) -> bool:
    """A device with known memory, more than the smallest share, not in MIG mode (its MIG
    instances are its partitions), of a type in :data:`SHAREABLE_TYPES` or, when ``explicit``,
    of any type but a NIC (an FPGA is shared only when a selector or policy names it)."""
    return (
        (dev.type in SHAREABLE_TYPES or (explicit and dev.type is not DeviceType.NIC))
        and (dev.memory_bytes or 0) >= (MEMORY_MIN_MIB + 1) * MIB
        and not any(p.kind is PartitionKind.MIG for p in dev.partitions)
        and dev.attributes.get("migMode") != "enabled"
    )


def is_memory_shared(dev: Device, selectors: Sequence[Selector]) -> bool:
    return any(s.matches(dev) and shareable(dev, s.explicit(dev)) for s in selectors)


#: Enough memory to be shareable: stands in for an unknown size when asking "would it be?".
SOME_MEMORY = (MEMORY_MIN_MIB + 1) * MIB


def unknown_memory(devices: Iterable[Device], selectors: Sequence[Selector]) -> list[str]:
    """One message per selector that matches devices it would share but whose memory discovery
    could not read (for NVIDIA GPUs: NVML not found): those are published whole, and an admin
    should hear why rather than find ``allowMultipleAllocations`` missing."""
    out = []
    for sel in selectors:
        names = [
            d.name
            for d in devices
            if sel.matches(d)
            and not d.memory_bytes
            and shareable(d.replace(memory_bytes=SOME_MEMORY), sel.explicit(d))
        ]
        if names:
            listed = ", ".join(names[:4]) + (" and more" if len(names) > 4 else "")
            out.append(
                f"memory-shared selector {sel} selects {len(names)} devices whose memory is "
                f"unknown ({listed}): published "
                "whole, not memory-shared (NVIDIA GPUs: NVML not found; chart values "
                "nvidia.driverRoot / nvidia.libraryDir, or --nvml on to log why)"
            )
    return out


def shared_capacity(memory_bytes: int) -> dict[str, dict[str, object]]:
    """The ``capacity`` of a memory-shared GPU's slice entry, with request policies."""
    top = memory_bytes // MIB  # whole MiB: a share is always a whole number of MiB
    return {
        MEMORY: {
            "value": str(memory_bytes),
            "requestPolicy": {
                "default": f"{top}Mi",
                "validRange": {"min": f"{MEMORY_MIN_MIB}Mi", "max": f"{top}Mi", "step": "1Mi"},
            },
        },
        CORES: {
            "value": str(CORES_TOTAL),
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": str(CORES_TOTAL), "step": "1"},
            },
        },
    }


def share_id_error(share_id: str) -> str:
    """Why ``share_id`` cannot name a CDI device ("" when it can; the API server writes UUIDs)."""
    if _SHARE_ID.fullmatch(share_id):
        return ""
    return f"shareID {share_id[:80]!r} is not a Kubernetes UID"


@dataclass(frozen=True)
class ShareLimits:
    """What one allocated share may use: memory in MiB, compute in percent."""

    memory_mib: int
    cores: int

    @classmethod
    def from_consumed(cls, consumed: Mapping[str, str], memory_bytes: int) -> ShareLimits:
        """From an allocation result's ``consumedCapacity``; ValueError if it is malformed.

        Memory not named: the whole GPU's; cores not named or 0: no limit (100).
        """
        try:
            mem = parse_quantity(consumed[MEMORY]) if MEMORY in consumed else None
            cores = parse_quantity(consumed[CORES]) if CORES in consumed else Fraction(0)
        except QuantityError as exc:
            raise ValueError(f"consumedCapacity: {exc}") from None
        if mem is not None and mem <= 0:
            raise ValueError(f"consumedCapacity: {MEMORY} is {consumed[MEMORY]}")
        if not 0 <= cores <= CORES_TOTAL:
            raise ValueError(f"consumedCapacity: {CORES} is {consumed[CORES]}")
        mib = int(mem // MIB) if mem is not None else memory_bytes // MIB
        pct = int(cores) if cores > 0 else CORES_TOTAL
        return cls(memory_mib=max(mib, 1), cores=max(pct, 1))


@dataclass(frozen=True)
class UnitLimits:
    """One entry of ``ACCELERATOR_UNITS`` as the limit variables see it."""

    vendor: str
    #: The share's limits; None for a device the claim has whole.
    share: ShareLimits | None
    memory_bytes: int = 0

    @property
    def memory_mib(self) -> int:
        return self.share.memory_mib if self.share else self.memory_bytes // MIB

    @property
    def cores(self) -> int:
        return self.share.cores if self.share else CORES_TOTAL


def limit_env(units: Sequence[UnitLimits]) -> dict[str, str]:
    """The claim-wide limit variables, or nothing when no unit is a share.

    ``KUBEACC_DEVICE_MEMORY_LIMIT``/``KUBEACC_DEVICE_CORES_LIMIT`` have one entry per unit in
    ``ACCELERATOR_UNITS`` order (a whole device: all its memory, 100). The CUDA MPS variables
    cover the NVIDIA units, numbered as CUDA enumerates them in that order; MPS takes one thread
    percentage per client, so a claim with several shares gets the smallest.
    """
    if not any(u.share for u in units):
        return {}
    env = {
        ENV_MEMORY: ",".join(str(u.memory_mib) for u in units),
        ENV_CORES: ",".join(str(u.cores) for u in units),
    }
    nvidia = [u for u in units if u.vendor.lower() == "nvidia"]
    if any(u.share for u in nvidia):
        env[ENV_MPS_MEMORY] = ",".join(f"{i}={u.memory_mib}M" for i, u in enumerate(nvidia))
        env[ENV_MPS_CORES] = str(min(u.cores for u in nvidia))
    return env
