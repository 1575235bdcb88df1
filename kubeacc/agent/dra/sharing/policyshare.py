"""AcceleratorPolicies that make devices memory-shared, or choose MIG profiles, on this node.

A policy whose ``sharing.mode`` is ``MemoryShared`` or ``MPS`` selects devices by type, vendor
and model (the same rule as the CEL selector of the DeviceClass it generates: empty lists match
everything, values match exactly); the agent publishes the devices it selects as memory-shared,
as it does for ``--memory-shared`` selectors. GPUs and KunLun XPUs are shareable; any other type
(an FPGA, say) only when the policy lists the type in ``selector.types``.

A ``MIG`` policy (:class:`PolicyMig`) selects GPUs the same way and names the MIG profiles whose
partitions the agent publishes for the selected GPUs in MIG mode (:func:`mig_filters`).

:class:`PolicyShares` keeps the selectors of the policies it last read; a failed read keeps the
previous ones (the API server away must not un-share devices that claims use).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubeacc.crds.api import MEMORY_SHARED_MODES, SharingMode
from kubeacc.crds.policyread import valid_specs
from kubeacc.crds.views import PolicySpecView
from kubeacc.model import Device, DeviceType

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyShare:
    """The device selector of one memory-sharing policy."""

    policy: str
    types: frozenset[str] = frozenset()
    vendors: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()

    def matches(self, dev: Device) -> bool:
        return (
            (not self.types or dev.type.value in self.types)
            and (not self.vendors or dev.vendor in self.vendors)
            and (not self.models or dev.model in self.models)
        )

    def explicit(self, dev: Device) -> bool:
        """The policy names the device's type (what makes an FPGA shareable)."""
        return dev.type.value in self.types

    def __str__(self) -> str:
        return f"policy {self.policy}"


@dataclass(frozen=True)
class PolicyMig(PolicyShare):
    """A ``MIG`` policy: the profiles it publishes on the GPUs it selects."""

    profiles: frozenset[str] = frozenset()
    whole: bool = True
    #: The policy object's identity (for events about it).
    uid: str = ""


def _selector(spec: PolicySpecView) -> tuple[frozenset[str], frozenset[str], frozenset[str]]:
    """The policy selector's types, vendors and models (the fields of :class:`PolicyShare`)."""
    sel = spec.selector
    return frozenset(sel.types), frozenset(sel.vendors), frozenset(sel.models)


def policy_shares(policies: Iterable[dict[str, Any]]) -> tuple[PolicyShare, ...]:
    """The selectors of the memory-sharing policies among ``policies`` (API objects)."""
    out = []
    for name, _, spec in valid_specs(policies):
        if spec.sharing.mode not in MEMORY_SHARED_MODES:
            continue
        out.append(PolicyShare(name, *_selector(spec)))
    return tuple(sorted(out, key=lambda p: p.policy))


def policy_migs(policies: Iterable[dict[str, Any]]) -> tuple[PolicyMig, ...]:
    """The ``MIG`` policies among ``policies`` (API objects)."""
    out = []
    for name, uid, spec in valid_specs(policies):
        if spec.sharing.mode != SharingMode.MIG or not spec.sharing.mig_profiles:
            continue
        out.append(
            PolicyMig(
                name,
                *_selector(spec),
                profiles=frozenset(spec.sharing.mig_profiles),
                whole=spec.sharing.mig_whole_gpu is not False,
                uid=uid,
            )
        )
    return tuple(sorted(out, key=lambda p: p.policy))


@dataclass(frozen=True)
class MigFilter:
    """What the MIG policies let one MIG GPU publish: placements of ``profiles`` and, when
    ``whole``, the GPU itself (the union over the policies that select it)."""

    profiles: frozenset[str]
    whole: bool


def mig_filters(
    migs: Iterable[PolicyMig], gpus: Iterable[Device], offered: Mapping[str, Collection[str]]
) -> tuple[dict[str, MigFilter], list[tuple[PolicyMig, str]]]:
    """The filter of every MIG-mode GPU (by slice device name) some MIG policy selects, and
    one (policy, message) per policy some of whose selected GPUs are not in MIG mode (they
    publish nothing extra) or offer none of its profiles: the message counts and names them, so
    a node of many such GPUs raises one Warning per policy, not one per GPU.

    ``offered``: the MIG-mode GPUs (by slice device name) and the profiles they offer."""
    in_mig = offered
    migs = tuple(migs)
    filters: dict[str, MigFilter] = {}
    selected: dict[PolicyMig, int] = {}
    not_mig: dict[PolicyMig, list[Device]] = {}
    no_profile: dict[PolicyMig, list[Device]] = {}
    for dev in gpus:
        if dev.type is not DeviceType.GPU:
            continue
        selecting = [m for m in migs if m.matches(dev)]
        if not selecting:
            continue
        for m in selecting:
            selected[m] = selected.get(m, 0) + 1
        if dev.name not in in_mig:
            for m in selecting:
                not_mig.setdefault(m, []).append(dev)
            continue
        for m in selecting:
            if not m.profiles & set(in_mig[dev.name]):
                no_profile.setdefault(m, []).append(dev)
        filters[dev.name] = MigFilter(
            frozenset().union(*(m.profiles for m in selecting)),
            any(m.whole for m in selecting),
        )
    problems = [
        (m, _mig_problem(m, selected[m], not_mig.get(m, []), no_profile.get(m, []), in_mig))
        for m in migs
        if m in not_mig or m in no_profile
    ]
    return filters, problems


#: GPUs named in one MIG problem message; the rest are counted.
_NAMED_GPUS = 4


def _gpus(devs: list[Device], describe: Callable[[Device], str]) -> str:
    named = ", ".join(describe(d) for d in devs[:_NAMED_GPUS])
    more = len(devs) - _NAMED_GPUS
    return named + (f" and {more} more" if more > 0 else "")


def _mig_problem(
    m: PolicyMig,
    selected: int,
    not_mig: list[Device],
    no_profile: list[Device],
    offered: Mapping[str, Collection[str]],
) -> str:
    parts = []
    if not_mig:
        listed = _gpus(not_mig, lambda d: f"GPU {d.name} ({d.model})")
        parts.append(
            f"{len(not_mig)} not in MIG mode ({listed}) publish no partitions "
            "(turn MIG mode on with an AcceleratorOperation MigMode)"
        )
    if no_profile:
        listed = _gpus(
            no_profile,
            lambda d: (
                f"GPU {d.name} ({d.model}) offers "
                f"{', '.join(sorted(offered[d.name])) or 'no free placement'}"
            ),
        )
        parts.append(
            f"{len(no_profile)} offer none of the MIG profiles {', '.join(sorted(m.profiles))} "
            f"({listed})"
        )
    count = len(not_mig) + len(no_profile)
    return f"{count} of the {selected} GPUs it selects here: " + "; ".join(parts)


class PolicyShares:
    """The memory-sharing and MIG policies as last read through ``list_policies``."""

    def __init__(self, list_policies: Callable[[], list[dict[str, Any]]]) -> None:
        self.list_policies = list_policies
        self.current: tuple[PolicyShare, ...] = ()
        #: The MIG policies of the last successful read.
        self.migs: tuple[PolicyMig, ...] = ()
        self._error = ""

    def refresh(self) -> tuple[PolicyShare, ...]:
        """Read the policies; the memory-sharing ones are returned, the MIG ones kept in
        :attr:`migs`."""
        try:
            listed = self.list_policies()
            found = policy_shares(listed)
            migs = policy_migs(listed)
        except Exception as exc:  # API server away, or no RBAC to list policies
            if str(exc) != self._error:
                log.warning("cannot read AcceleratorPolicies (keeping the last): %s", exc)
            self._error = str(exc)
            return self.current
        self._error = ""
        if migs != self.migs:
            log.info("MIG policies: %s", ", ".join(map(str, migs)) or "none")
        self.migs = migs
        if found != self.current:
            log.info("memory-sharing policies: %s", ", ".join(map(str, found)) or "none")
        self.current = found
        return found
