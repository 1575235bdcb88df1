"""Validation of AcceleratorOperations against the inventory and the policies (pure functions)."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from kubeacc.crds.api import CONTROLLER_ACTIONS, Action
from kubeacc.crds.controlread import accelerator_device, accelerator_spec, accelerator_status
from kubeacc.crds.policyread import selector_matches
from kubeacc.crds.views import (
    AcceleratorSpecView,
    AcceleratorStatusView,
    ConsumerView,
    OperationSpecView,
    OperationStatusView,
    PolicySpecView,
)
from kubeacc.model import Device, DeviceType


@dataclass(frozen=True)
class Refusal:
    reason: str
    message: str


@dataclass(frozen=True)
class TargetView:
    """One target Accelerator as the controller sees it: its spec and status as schema
    Structs, the device of its status as the model's."""

    name: str
    spec: AcceleratorSpecView
    status: AcceleratorStatusView
    device: Device | None

    @classmethod
    def parse(cls, obj: dict[str, Any]) -> TargetView:
        return cls(
            name=obj["metadata"]["name"],
            spec=accelerator_spec(obj),
            status=accelerator_status(obj),
            device=accelerator_device(obj),
        )

    @property
    def consumers(self) -> list[ConsumerView]:
        return list(self.status.allocated_to)


def covering(policies: dict[str, PolicySpecView], device: Device) -> list[str]:
    """Names of the policies whose selector covers ``device``."""
    return sorted(n for n, p in policies.items() if selector_matches(p.selector, device))


def _who(consumers: list[ConsumerView]) -> str:
    parts = [f"{c.kind} {c.namespace + '/' if c.namespace else ''}{c.name}" for c in consumers]
    return ", ".join(parts[:3]) + (f" and {len(parts) - 3} more" if len(parts) > 3 else "")


#: ``admins`` entry that lets every namespace operate on every device (tests, the demo).
ANY_NAMESPACE = "*"


def validate(
    namespace: str,
    spec: OperationSpecView,
    targets: dict[str, TargetView | None],
    policies: dict[str, PolicySpecView],
    admins: Collection[str] = (ANY_NAMESPACE,),
) -> Refusal | None:
    """Why the operation must not run (the first reason found), or None.

    An operation from one of the ``admins`` namespaces (the controller's own, by default) may
    target any device; from any other namespace, only devices an AcceleratorPolicy covering
    them grants that namespace (``allowedNamespaces``). No policy, or one with no namespaces,
    grants nothing (docs/security.md, "Hardware operations")."""
    missing = sorted(n for n, t in targets.items() if t is None)
    if missing:
        return Refusal("AcceleratorNotFound", f"no Accelerator named {', '.join(missing)}")
    for name, view in targets.items():
        assert view is not None
        dev = view.device
        if dev is None:
            return Refusal("AcceleratorNotReady", f"{name}: its node agent has not reported it")
        names = covering(policies, dev)
        if not granted(namespace, dev, policies, admins):
            where = (
                f"none of the AcceleratorPolicies covering it ({', '.join(names)})"
                if names
                else "no AcceleratorPolicy covering it"
            )
            return Refusal(
                "NamespaceNotAllowed",
                f"{name}: {where} grants namespace {namespace} operations (spec."
                f"allowedNamespaces); without a grant only namespace(s) "
                f"{', '.join(sorted(admins))} may",
            )
        # Program needs an FPGA's state (checked below), not a PCI function: an FPGA that
        # OpenStack Cyborg reports has one without the other (docs/cyborg.md)
        if (
            spec.action not in CONTROLLER_ACTIONS
            and spec.action != Action.PROGRAM
            and dev.pci is None
        ):
            return Refusal("NotAPCIDevice", f"{name}: {spec.action} needs a PCI device")
        if spec.action == Action.MIG_MODE and (
            dev.type is not DeviceType.GPU or dev.vendor.lower() != "nvidia"
        ):
            return Refusal("NotAnNvidiaGPU", f"{name}: MigMode needs an NVIDIA GPU")
        if spec.action == Action.PROGRAM:
            refusal = _check_program(name, dev, spec, names, policies)
            if refusal:
                return refusal
    return None


def granted(
    namespace: str,
    dev: Device,
    policies: dict[str, PolicySpecView],
    admins: Collection[str] = (ANY_NAMESPACE,),
) -> bool:
    """Whether operations from ``namespace`` may touch ``dev`` (see :func:`validate`)."""
    if namespace in admins or ANY_NAMESPACE in admins:
        return True
    return any(namespace in policies[p].allowed_namespaces for p in covering(policies, dev))


def choose_targets(
    namespace: str,
    matched: list[TargetView],
    in_use: Collection[str],
    limit: int,
    policies: dict[str, PolicySpecView],
    admins: Collection[str] = (ANY_NAMESPACE,),
) -> list[str]:
    """The names a ``spec.targetSelector`` resolves to among the ``matched`` Accelerators.

    Devices the namespace may operate come first, then those whose agent has reported them,
    then idle ones (not in ``in_use``), then name order; at most ``limit``. The choice is
    validated afterwards like named targets, so a selector matching only devices the
    namespace may not touch fails with the same reason as naming them."""

    def rank(view: TargetView) -> tuple[bool, bool, bool, str]:
        dev = view.device
        allowed = dev is not None and granted(namespace, dev, policies, admins)
        return (not allowed, dev is None, view.name in in_use, view.name)

    return [v.name for v in sorted(matched, key=rank)[:limit]]


def _check_program(
    name: str,
    dev: Device,
    spec: OperationSpecView,
    names: list[str],
    policies: dict[str, PolicySpecView],
) -> Refusal | None:
    assert spec.program is not None
    if dev.type is not DeviceType.FPGA or dev.fpga is None:
        return Refusal("NotAnFPGA", f"{name} is a {dev.type.value}, not an FPGA")
    digest = spec.program.sha256
    for pname in names:
        if any(b.sha256 == digest for b in policies[pname].allowed_bitstreams):
            return None
    where = f"the policies covering it ({', '.join(names)})" if names else "any AcceleratorPolicy"
    return Refusal(
        "BitstreamNotAllowed",
        f"{name}: bitstream {spec.program.bitstream} (sha256 {digest[:12]}…) is not allowed by "
        f"{where}; add it to spec.allowedBitstreams of a policy that selects this FPGA",
    )


def busy(targets: dict[str, TargetView | None]) -> dict[str, str]:
    """Targets in use -> who uses them."""
    return {n: _who(t.consumers) for n, t in targets.items() if t is not None and t.consumers}


def attributable_results(status: OperationStatusView) -> dict[str, Any]:
    """Results by target, only those that name the node the target was dispatched to.

    The admission policy refuses any other result from a node agent; this keeps a forged one
    (written where the policy is not installed, or before it was) from finishing a target.
    """
    dispatched = {d.accelerator: d.node for d in status.dispatch}
    return {r.accelerator: r for r in status.results if dispatched.get(r.accelerator) == r.node}


def claim_holders(
    claims: list[dict[str, Any]], targets: dict[str, TargetView | None], driver: str
) -> dict[str, str]:
    """Targets that a reserved ResourceClaim holds -> which claims.

    Covers the moment between the scheduler's allocation and the node agent's prepare, before
    ``status.allocatedTo`` names the claim. A claim's SR-IOV VF (``<device>-vf<N>``) counts
    as its physical function.
    """
    by_device = {
        (t.spec.node, t.spec.device_name): name for name, t in targets.items() if t is not None
    }
    held: dict[str, list[str]] = {}
    for claim in claims:
        status = claim.get("status") or {}
        if not status.get("reservedFor"):
            continue
        results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
        for r in results:
            if r.get("driver") != driver:
                continue
            device = str(r.get("device", ""))
            pf, sep, vf = device.rpartition("-vf")
            name = by_device.get((r.get("pool"), device))
            if name is None and sep and vf.isdigit():
                name = by_device.get((r.get("pool"), pf))
            if name is not None:
                meta = claim.get("metadata") or {}
                ref = f"ResourceClaim {meta.get('namespace')}/{meta.get('name')}"
                if ref not in held.setdefault(name, []):
                    held[name].append(ref)
    return {n: ", ".join(refs) for n, refs in held.items()}
