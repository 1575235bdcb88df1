"""GPU sharing in device-plugin mode: anonymous units, mapped to the extender's decision.

A type configured ``shared: true`` is served as three resources whose device IDs carry no
meaning of their own: ``kubeacc.io/gpu-memory`` (one ID per MiB of each healthy GPU),
``kubeacc.io/gpu-cores`` (100 per GPU) and the whole-GPU resource (``kubeacc.io/gpu`` or
``kubeacc.io/gpu-<model>``, one per GPU). The kubelet only counts them; ``kubeacc extender``
decides which GPU each container gets and records it on the pod (condition
``kubeacc.io/Decided``, which a namespace user cannot write, and annotation
``kubeacc.io/devices``; where they disagree the condition counts: kubeacc/contracts/trusted.py).
Allocate carries no pod identity, so :class:`DecisionLookup` finds the container being admitted:
among the pods bound to this node with a decision, the first, in the order the extender decided
(and bound) them, whose request of that resource equals the number of IDs asked and whose
decision was not handed out yet. A container without a decision gets an Allocate error, never a
GPU picked at random.

The kubelet reads a plugin's device list as one gRPC message of at most 4 MiB: about 200,000
IDs. A node's GPU memory is advertised up to :data:`MAX_MEMORY_UNITS` MiB; GPUs beyond it are
left out of ``kubeacc.io/gpu-memory`` (with a warning) and remain usable as whole GPUs.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import TYPE_CHECKING, Any

from kubeacc.contracts.names import GPU_CORES_RESOURCE, GPU_MEMORY_RESOURCE, GPU_UNITS_RESOURCE
from kubeacc.deviceplugin.allocation import AllocationError, ContainerDevices, allocate
from kubeacc.model import Device
from kubeacc.node.sharelimit import EditsError, Limiter, container_account
from kubeacc.units.table import active_table

if TYPE_CHECKING:  # the extender's code loads at the first shared allocation
    from kubeacc.contracts.wants import Assigned

log = logging.getLogger(__name__)

MEMORY_RESOURCE = GPU_MEMORY_RESOURCE
CORES_RESOURCE = GPU_CORES_RESOURCE
UNITS_RESOURCE = GPU_UNITS_RESOURCE
#: Units advertised per node at most (the same 4 MiB limit; 8 B200s are 18,000).
MAX_UNIT_IDS = 100_000
#: MiB advertised per node (the kubelet's 4 MiB message limit, with room to spare).
MAX_MEMORY_UNITS = 192 * 1024
CORES_PER_GPU = 100
MIB = 1 << 20

MEMORY_LIMIT_ENV = "KUBEACC_DEVICE_MEMORY_LIMIT"
CORES_LIMIT_ENV = "KUBEACC_DEVICE_CORES_LIMIT"
MPS_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"
MPS_CORES_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"


class Kind(StrEnum):
    WHOLE = "whole"
    MEMORY = "memory"
    CORES = "cores"
    UNITS = "units"


def memory_mib(dev: Device) -> int:
    return (dev.memory_bytes or 0) // MIB


def _units(dev: Device) -> int:
    return active_table().units_for(dev.model)


#: Per counted kind: IDs of one GPU, the most a node advertises, the ID prefix, the resource.
_COUNTED: dict[Kind, tuple[Callable[[Device], int], int, str, str]] = {
    Kind.MEMORY: (memory_mib, MAX_MEMORY_UNITS, "m", MEMORY_RESOURCE),
    Kind.UNITS: (_units, MAX_UNIT_IDS, "u", UNITS_RESOURCE),
}


#: The first letter of a unit's ID per kind: the ID is ``<letter><GPU's position>[-<unit>]``.
_LETTER = {Kind.WHOLE: "g", Kind.CORES: "c", Kind.MEMORY: "m", Kind.UNITS: "u"}


def id_gpus(kind: Kind, devices: Sequence[Device]) -> dict[str, Device]:
    """The GPU each unit ID stands for, by the ID's part before ``-`` (see :func:`unit_ids`;
    :func:`~kubeacc.contracts.unitid.id_gpu_key` reads it back)."""
    return {f"{_LETTER[kind]}{n}": dev for n, dev in enumerate(devices)}


def unit_ids(kind: Kind, devices: Sequence[Device]) -> list[tuple[str, Device]]:
    """(ID, GPU) of every unit advertised for ``kind``; IDs are short (the 4 MiB limit)."""
    if kind is Kind.WHOLE:
        return [(f"g{n}", dev) for n, dev in enumerate(devices)]
    if kind is Kind.CORES:
        return [(f"c{n}-{i}", dev) for n, dev in enumerate(devices) for i in range(CORES_PER_GPU)]
    per_gpu, cap, prefix, resource = _COUNTED[kind]
    out: list[tuple[str, Device]] = []
    total = 0
    for n, dev in enumerate(devices):
        count = per_gpu(dev)
        if total + count > cap:
            log.warning(
                "%s: %d more would exceed the %d a node can advertise as %s; left out",
                dev.name,
                count,
                cap,
                resource,
            )
            continue
        total += count
        out += [(f"{prefix}{n}-{i:x}", dev) for i in range(count)]
    return out


@dataclass(frozen=True)
class Found:
    """The container an Allocate call is for, and what the extender gave it."""

    pod: str  # namespace/name
    container: str
    devices: tuple[str, ...]
    memory: int
    cores: int
    #: What the containers of other pods this plugin already served hold, per GPU (BDF).
    others: Mapping[str, Held] = field(default_factory=dict)


@dataclass
class Held:
    """What served containers hold of one GPU: whole, or the sum of their shares."""

    whole: bool = False
    memory: int = 0
    cores: int = 0

    def add(self, got: Assigned) -> None:
        if got.whole:
            self.whole = True
        else:
            self.memory += got.memory
            self.cores += got.cores


class DecisionLookup:
    """Finds the container being admitted from the pods on this node (see module doc).

    ``list_pods`` returns the node's pods as dicts; ``allocated`` the (pod, container,
    resource) triples the kubelet already allocated (its PodResources API). Each decision is
    handed out once per resource; a restarted agent first counts what the kubelet allocated
    before it as handed out. What a container was handed stays what it holds, for the room
    left next to it, even when its pod's decision is later removed or changed. All of it is
    forgotten when the pod finishes or goes, or comes back under its name as a new pod (a
    StatefulSet's), whose decision is its own.

    Order: decisions in the order the extender made them (``at``; it binds the pods of one node
    in that order, so the kubelet learns of them in that order and admits them so). The
    resources of one container come in consecutive calls: a container chosen for one resource
    is preferred for the next resource it asks for, so its memory and its cores come from the
    same decision.
    """

    def __init__(
        self,
        node: str,
        list_pods: Callable[[], list[dict[str, Any]]],
        allocated: Callable[[], set[tuple[str, str, str]]] | None = None,
    ) -> None:
        self.node = node
        self.list_pods = list_pods
        self.allocated = allocated
        self._handed: set[tuple[str, str, str]] = set()
        #: What each (pod, container) served was handed, as decided then.
        self._gave: dict[tuple[str, str], Assigned] = {}
        #: The uid of each listed, unfinished pod (namespace/name) the last call saw.
        self._uids: dict[str, str] = {}
        self._seeded = allocated is None
        self._last: tuple[str, str] | None = None
        self._lock = threading.Lock()

    def _seed(self) -> None:
        if self._seeded or self.allocated is None:
            return
        try:
            self._handed |= self.allocated()
            self._seeded = True
        except Exception as err:  # the kubelet's pod-resources API is optional here
            log.debug("pod resources: %s", err)

    def _forget(self, pods: list[dict[str, Any]]) -> None:
        """Drop what was handed out to pods gone, finished or recreated since the last call.

        The kubelet's pod-resources API names pods, not their uids: a pod recreated under the
        same name would otherwise find its containers "handed out" already and be refused.
        """
        live: dict[str, str] = {}
        for pod in pods:
            meta = pod.get("metadata") or {}
            if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                key = f"{meta.get('namespace')}/{meta.get('name')}"
                live[key] = str(meta.get("uid") or "")
        stale = {k for k, uid in self._uids.items() if live.get(k, uid) != uid}
        keep = live.keys() - stale
        self._handed = {h for h in self._handed if h[0] in keep}
        self._gave = {k: v for k, v in self._gave.items() if k[0] in keep}
        self._uids = live

    def find(
        self,
        resource: str,
        kind: Kind,
        count: int,
        devices: Mapping[str, Device] | None = None,
    ) -> Found:
        """The container being admitted; with ``devices``, one whose decision also has room
        next to the containers served before (a refused one is not counted as served)."""
        from kubeacc.contracts.trusted import trusted_decision
        from kubeacc.contracts.wants import WantError, container_want

        try:
            pods = self.list_pods()
        except Exception as err:
            raise AllocationError(f"cannot read the pods of node {self.node}: {err}") from err
        with self._lock:
            self._seed()
            self._forget(pods)
            candidates: list[tuple[bool, float, str, str, Found]] = []
            deciding: dict[tuple[str, str], Assigned] = {}
            undecided = 0
            refused: list[str] = []
            served: list[tuple[str, Assigned]] = []
            handed = {h[:2] for h in self._handed}
            for pod in pods:
                meta = pod.get("metadata") or {}
                if (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
                    continue
                key_pod = f"{meta.get('namespace')}/{meta.get('name')}"
                decision, why = trusted_decision(pod)
                if decision is not None and why:
                    log.warning("pod %s: %s", key_pod, why)
                if decision is not None and decision.node != self.node:
                    why = f"decided for node {decision.node}"
                    decision = None
                for c in (pod.get("spec") or {}).get("containers") or []:
                    name = str(c.get("name", ""))
                    got = decision.container(name) if decision else None
                    gave = self._gave.get((key_pod, name), got)
                    if gave is not None and (key_pod, name) in handed:
                        served.append((key_pod, gave))
                    try:
                        want = container_want(name, c.get("resources"))
                    except WantError:
                        continue
                    if want is None:
                        continue
                    amount = {
                        Kind.MEMORY: want.memory,
                        Kind.CORES: want.cores,
                        Kind.UNITS: want.units,
                    }.get(kind, want.whole)
                    if amount != count:
                        continue
                    if kind is Kind.WHOLE and resource != _whole_resource(want.model):
                        continue
                    if got is None:
                        undecided += 1
                        if why:
                            refused.append(f"{key_pod}: {why}")
                        continue
                    if (key_pod, name, resource) in self._handed:
                        continue
                    found = Found(key_pod, name, got.devices, got.memory, got.cores)
                    latest = self._last != (key_pod, name)
                    candidates.append(
                        (latest, decision.at if decision else 0.0, key_pod, name, found)
                    )
                    deciding[key_pod, name] = got
            if not candidates:
                hint = f" ({undecided} container(s) ask for it without one)" if undecided else ""
                if refused:
                    hint += f"; {refused[0]}"
                raise AllocationError(
                    f"no kubeacc extender decision (annotation kubeacc.io/devices) for a "
                    f"container asking {count} {resource} on node {self.node}{hint}: pods "
                    "sharing GPUs must be scheduled by a kube-scheduler configured with "
                    "kubeacc extender"
                )
            candidates.sort(key=lambda c: c[:4])
            chosen = candidates[0][4]
            others: dict[str, Held] = {}
            for key_pod, got in served:
                if key_pod != chosen.pod:
                    for bdf in got.devices:
                        others.setdefault(bdf, Held()).add(got)
            chosen = replace(chosen, others=others)
            if devices is not None and all(b in devices for b in chosen.devices):
                _check_room(kind, chosen, devices)
            self._handed.add((chosen.pod, chosen.container, resource))
            self._gave.setdefault(
                (chosen.pod, chosen.container), deciding[chosen.pod, chosen.container]
            )
            self._last = (chosen.pod, chosen.container)
        return chosen


def _whole_resource(model: str | None) -> str:
    return "kubeacc.io/gpu" if model is None else f"kubeacc.io/gpu-{model}"


def shared_allocate(
    kind: Kind,
    found: Found,
    devices: Mapping[str, Device],
    cdi_kind: str | None,
    limiter: Limiter | None = None,
    enforce: bool = True,
) -> ContainerDevices:
    """What the container gets: the decided GPU(s) and, for shares, the limits as env and,
    for a memory share, what enforces them (``limiter``; None or ``enforce`` false: the type's
    limits are advisory) and whether the pod's namespace accepts that (``Limiter.refusal``).
    The container's processes keep one account, named after the pod and container."""
    missing = [b for b in found.devices if b not in devices]
    if missing:
        raise AllocationError(
            f"pod {found.pod} container {found.container}: decided GPU(s) "
            f"{', '.join(missing)} not on this node (any more)"
        )
    _check_room(kind, found, devices)
    out = allocate(devices, list(found.devices), cdi_kind)
    if kind is Kind.MEMORY and found.memory:
        out.envs[MEMORY_LIMIT_ENV] = ",".join(str(found.memory) for _ in found.devices)
        out.envs[MPS_MEMORY_ENV] = ",".join(
            f"{i}={found.memory}M" for i in range(len(found.devices))
        )
        vendor = devices[found.devices[0]].vendor
        lim = limiter or Limiter()
        how = lim.enforcement(vendor, mps=False, enforce=enforce and limiter is not None)
        if why := lim.refusal(found.pod.split("/")[0], how):
            raise AllocationError(f"pod {found.pod} container {found.container}: {why}")
        try:
            env, mounts = lim.edits(
                how, container_account(found.pod, found.container), out.envs[MEMORY_LIMIT_ENV]
            )
        except EditsError as exc:
            raise AllocationError(f"pod {found.pod} container {found.container}: {exc}") from None
        out.envs.update(env)
        out.read_only_mounts.extend(mounts)
    if kind is Kind.CORES and found.cores:
        out.envs[CORES_LIMIT_ENV] = str(found.cores)
        out.envs[MPS_CORES_ENV] = str(found.cores)
    return out


def _check_room(kind: Kind, found: Found, devices: Mapping[str, Device]) -> None:
    """The decided GPU(s) must have room for this container next to the containers already
    served (a decision the extender made always has): a forged or stale decision must not
    take a GPU another pod holds whole, nor over-commit a shared one."""
    whole = kind in (Kind.WHOLE, Kind.UNITS)
    for bdf in found.devices:
        held = found.others.get(bdf) or Held()
        where = f"pod {found.pod} container {found.container}: GPU {bdf}"
        if held.whole or (whole and (held.memory or held.cores)):
            raise AllocationError(f"{where} is held by another pod")
        if whole:
            continue
        mib = memory_mib(devices[bdf])
        if found.memory + held.memory > mib:
            raise AllocationError(
                f"{where}: {found.memory} MiB do not fit next to the {held.memory} MiB "
                f"held by other pods ({mib} MiB)"
            )
        if found.cores + held.cores > CORES_PER_GPU:
            raise AllocationError(
                f"{where}: {found.cores}% of its cores do not fit next to the "
                f"{held.cores}% held by other pods"
            )
