"""The fault runner's invariants, as pure checks of one observation of the cluster.

A :class:`ClusterView` is what the runner read at one moment: the ResourceClaims and pods of the
workload's namespace (as API dicts) and, per node, the agent's checkpoint (``read_claims``) and
the claim UIDs of the CDI specs in its CDI directory. :func:`check` returns every violation of:

- ``double-allocation``: a whole device (no share ID) in the allocation of two claims (API), or
  in two prepared claims of one node's checkpoint;
- ``acknowledged-lost``: a claim of a Running pod (not terminating) on a settled node that is not
  in that node's checkpoint or has no CDI spec there (the kubelet was told it was prepared);
- ``leaked-cdi-spec`` / ``leaked-checkpoint``: a CDI spec or checkpoint entry of a claim the API
  no longer has, still there ``leak_grace`` seconds after it was first seen;
- ``pod-without-reason``: a pod neither Running nor Succeeded that gives no reason (Pending past
  ``pending_grace`` with no condition or waiting reason, Failed with no reason or message).

Hardware (:mod:`tests.faults.hardware`), on a node whose view has it:

- ``device-missing``: a claim of a Running pod on a settled node whose device is not there as
  prepared, for longer than ``hw_grace`` (after a reboot the agent makes it again): its MIG
  instance (the record's UUID) absent from the host, its FPGA not carrying the bitstream's AFU,
  a share's CDI device without the limits of the allocation's consumed capacity;
- ``status-missing``: such a claim without this node's ``status.devices`` entry of one of its
  devices, for longer than ``hw_grace`` (the agent writes them after prepare; an update lost
  in an outage stays missing);
- ``leaked-mig-instance`` / ``leaked-mig-record`` / ``leaked-metadata``: a MIG instance made
  after boot that no record of a prepared claim names, a record or a metadata directory of a
  claim not in the checkpoint, past ``leak_grace``;
- ``leaked-gpu-setting`` / ``leaked-mps-daemon``: a GPU compute mode or time slice off its
  default, or an MPS daemon running, while no prepared claim carries a configuration, past
  ``leak_grace``.

Checks that need time (leaks, pending pods) keep what they first saw in a :class:`Tracker`.
"""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from kubeacc.contracts.names import DRIVER_NAME
from tests.faults.hardware import Hardware


@dataclass(frozen=True)
class Violation:
    kind: str
    detail: str


@dataclass
class NodeView:
    name: str
    #: claim UID -> prepared claim as ``read_claims`` gives it
    checkpoint: dict[str, dict[str, Any]]
    cdi_uids: set[str]
    hardware: Hardware | None = None


@dataclass
class ClusterView:
    claims: list[dict[str, Any]]
    pods: list[dict[str, Any]]
    nodes: dict[str, NodeView]
    #: monotonic seconds when it was read
    at: float


@dataclass
class Tracker:
    """When each possible leak or reasonless pod was first seen (by key)."""

    first_seen: dict[str, float] = field(default_factory=dict)
    touched: set[str] = field(default_factory=set)

    def held(self, key: str, now: float, grace: float) -> bool:
        """True once ``key`` has been seen for longer than ``grace``."""
        self.touched.add(key)
        since = self.first_seen.setdefault(key, now)
        return now - since > grace

    def forget_untouched(self) -> None:
        """Drop what the last check no longer saw (a leak that went away starts over)."""
        self.first_seen = {k: v for k, v in self.first_seen.items() if k in self.touched}
        self.touched = set()


def claim_names(pod: dict[str, Any]) -> list[str]:
    """The ResourceClaims a pod uses: named in its spec (``resourceClaimName``), or made from a
    template (``status.resourceClaimStatuses``; the status lists only those)."""
    named = [
        str(rc["resourceClaimName"])
        for rc in (pod.get("spec") or {}).get("resourceClaims") or []
        if rc.get("resourceClaimName")
    ]
    made = [
        str(rcs["resourceClaimName"])
        for rcs in (pod.get("status") or {}).get("resourceClaimStatuses") or []
        if rcs.get("resourceClaimName")
    ]
    return list(dict.fromkeys(named + made))


def _results(claim: dict[str, Any]) -> list[dict[str, Any]]:
    alloc = (claim.get("status") or {}).get("allocation") or {}
    return list((alloc.get("devices") or {}).get("results") or [])


def _uid(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["uid"])


def _name(obj: dict[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def double_allocations(view: ClusterView) -> list[Violation]:
    out: list[Violation] = []
    holders: dict[tuple[str, str], list[str]] = {}
    for c in view.claims:
        for r in _results(c):
            if r.get("driver") == DRIVER_NAME and not r.get("shareID"):
                holders.setdefault((r["pool"], r["device"]), []).append(_name(c))
    for (pool, dev), names in sorted(holders.items()):
        if len(names) > 1:
            out.append(Violation("double-allocation", f"API: {pool}/{dev} in claims {names}"))
    for node in view.nodes.values():
        held: dict[tuple[str, str], list[str]] = {}
        for uid, claim in node.checkpoint.items():
            for d in claim.get("devices") or []:
                if not d.get("share_id"):
                    held.setdefault((d["pool"], d["device"]), []).append(
                        f"{claim.get('name')}({uid[:8]})"
                    )
        for (pool, dev), who in sorted(held.items()):
            if len(who) > 1:
                out.append(
                    Violation(
                        "double-allocation",
                        f"checkpoint of {node.name}: {pool}/{dev} prepared for {who}",
                    )
                )
    return out


def acknowledged_lost(view: ClusterView, settled: set[str]) -> list[Violation]:
    out: list[Violation] = []
    uid_of = {_name(c): _uid(c) for c in view.claims}
    for pod in view.pods:
        status = pod.get("status") or {}
        node = (pod.get("spec") or {}).get("nodeName")
        if status.get("phase") != "Running" or pod["metadata"].get("deletionTimestamp"):
            continue
        if node not in settled or node not in view.nodes:
            continue
        nv = view.nodes[node]
        for claim_name in claim_names(pod):
            uid = uid_of.get(claim_name)
            if uid is None:
                continue
            if uid not in nv.checkpoint:
                out.append(
                    Violation(
                        "acknowledged-lost",
                        f"pod {_name(pod)} Running on {node}: claim {uid} not in its checkpoint",
                    )
                )
            elif uid not in nv.cdi_uids:
                out.append(
                    Violation(
                        "acknowledged-lost",
                        f"pod {_name(pod)} Running on {node}: claim {uid} has no CDI spec",
                    )
                )
    return out


def leaks(view: ClusterView, tracker: Tracker, grace: float) -> list[Violation]:
    out: list[Violation] = []
    live = {_uid(c) for c in view.claims}
    for node in view.nodes.values():
        for what, uids in (
            ("leaked-cdi-spec", node.cdi_uids),
            ("leaked-checkpoint", set(node.checkpoint)),
        ):
            for uid in sorted(uids - live):
                if tracker.held(f"{what}:{node.name}:{uid}", view.at, grace):
                    name = (node.checkpoint.get(uid) or {}).get("name", "?")
                    out.append(
                        Violation(what, f"{node.name}: claim {name} ({uid}) is gone from the API")
                    )
    return out


def pod_reason(pod: dict[str, Any]) -> str:
    """Why a pod is not Running: its status reason, a False condition's reason, or a container's
    waiting/terminated reason; "" when it gives none."""
    status = pod.get("status") or {}
    if status.get("reason"):
        return str(status["reason"])
    for c in status.get("conditions") or []:
        if c.get("status") == "False" and c.get("reason"):
            return str(c["reason"])
    for cs in status.get("containerStatuses") or []:
        for state in ("waiting", "terminated"):
            reason = ((cs.get("state") or {}).get(state) or {}).get("reason")
            if reason:
                return str(reason)
    return str(status.get("message") or "")


def _pod_state(pod: dict[str, Any]) -> str:
    """Where a pod stands, for a report: its node, conditions and container states."""
    status = pod.get("status") or {}
    conds = ",".join(f"{c.get('type')}={c.get('status')}" for c in status.get("conditions") or [])
    states = ",".join(
        "/".join(sorted((cs.get("state") or {}).keys()))
        for cs in status.get("containerStatuses") or []
    )
    node = (pod.get("spec") or {}).get("nodeName") or "unbound"
    return f"pod {_name(pod)} on {node}: conditions [{conds}] containers [{states}]"


def pods_without_reason(view: ClusterView, tracker: Tracker, grace: float) -> list[Violation]:
    out: list[Violation] = []
    for pod in view.pods:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        if phase in ("Running", "Succeeded") or pod_reason(pod):
            continue
        if phase == "Failed" or tracker.held(f"pod:{_uid(pod)}", view.at, grace):
            out.append(Violation("pod-without-reason", f"{phase}, no reason: {_pod_state(pod)}"))
    return out


def _running_claims(view: ClusterView, node: str) -> list[dict[str, Any]]:
    """The API claims of the Running (not terminating) pods on ``node``."""
    by_name = {_name(c): c for c in view.claims}
    out = []
    for pod in view.pods:
        status = pod.get("status") or {}
        if (pod.get("spec") or {}).get("nodeName") != node or status.get("phase") != "Running":
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        for claim_name in claim_names(pod):
            if (c := by_name.get(claim_name)) is not None:
                out.append(c)
    return out


def _status_devices(claim: dict[str, Any], pool: str) -> set[tuple[str]]:
    """The devices of ``pool`` that the claim's ``status.devices`` has an entry of."""
    return {
        (str(d.get("device")),)
        for d in (claim.get("status") or {}).get("devices") or []
        if d.get("driver") == DRIVER_NAME and d.get("pool") == pool
    }


def _mebibytes(quantity: str) -> int:
    """``9537Mi`` or a plain byte count, in MiB (rounded up)."""
    if quantity.endswith("Mi"):
        return int(quantity[:-2])
    if quantity.endswith("Gi"):
        return int(quantity[:-2]) * 1024
    return -(-int(quantity) // (1 << 20))


def _device_problem(
    node: NodeView, hw: Hardware, uid: str, result: dict[str, Any], afu: str
) -> str | None:
    """How the device of ``result`` differs from its prepared state; None: it is as prepared."""
    device = str(result["device"])
    records = [r for r in hw.mig_records if r["claim"] == uid and r["device"] == device]
    for r in records:
        if r.get("uuid") not in hw.mig_instances:
            return f"MIG instance {r.get('uuid')} of {device} is not on the host"
    config = (node.checkpoint.get(uid) or {}).get("config") or {}
    loads = "bitstream" in json.dumps(config.get(device) or {})
    if loads and device in hw.fpga_afu and hw.fpga_afu[device] != afu:
        return f"FPGA {device} carries AFU {hw.fpga_afu[device] or 'none'}, not {afu}"
    share = result.get("shareID")
    if share:
        env = hw.cdi_env.get(f"{uid}-{device}-{share}")
        if env is None:
            return f"share {share} of {device} has no CDI device"
        want = result.get("consumedCapacity") or {}
        memory = want.get("kubeacc.io/memory")
        if memory and env.get("KUBEACC_DEVICE_MEMORY_LIMIT") != str(_mebibytes(memory)):
            return (
                f"share {share} of {device}: memory limit "
                f"{env.get('KUBEACC_DEVICE_MEMORY_LIMIT')} MiB, allocated {memory}"
            )
        cores = want.get("kubeacc.io/cores")
        if cores and env.get("KUBEACC_DEVICE_CORES_LIMIT") != str(cores):
            return (
                f"share {share} of {device}: cores limit "
                f"{env.get('KUBEACC_DEVICE_CORES_LIMIT')}, allocated {cores}"
            )
    return None


def hardware(
    view: ClusterView,
    tracker: Tracker,
    settled: set[str],
    *,
    leak_grace: float,
    hw_grace: float,
    afu: str,
) -> list[Violation]:
    """The hardware invariants of the module doc."""
    out: list[Violation] = []
    for node in view.nodes.values():
        hw = node.hardware
        if hw is None:
            continue
        prepared = set(node.checkpoint)
        if node.name in settled:
            for c in _running_claims(view, node.name):
                uid = _uid(c)
                if uid not in prepared:
                    continue  # acknowledged_lost reports it
                for r in _results(c):
                    if r.get("driver") != DRIVER_NAME or r.get("pool") != node.name:
                        continue
                    problem = _device_problem(node, hw, uid, r, afu)
                    if not problem and (r["device"],) not in _status_devices(c, node.name):
                        key = f"status-missing:{node.name}:{uid}:{r['device']}"
                        if tracker.held(key, view.at, hw_grace):
                            out.append(
                                Violation(
                                    "status-missing",
                                    f"{node.name}: claim {_name(c)} has no status.devices entry "
                                    f"of {r['device']}",
                                )
                            )
                    key = f"device-missing:{node.name}:{uid}:{r['device']}"
                    if problem and tracker.held(key, view.at, hw_grace):
                        out.append(Violation("device-missing", f"{node.name}: {problem}"))
        ours = {r.get("uuid") for r in hw.mig_records if r["claim"] in prepared}
        configured = any((c.get("config") or {}) for c in node.checkpoint.values())
        leaks_now = [
            *(
                ("leaked-mig-instance", f"{uuid} ({where})")
                for uuid, where in sorted(hw.mig_instances.items())
                if uuid not in ours
            ),
            *(
                ("leaked-mig-record", f"claim {r['claim']} device {r['device']}")
                for r in hw.mig_records
                if r["claim"] not in prepared
            ),
            *(("leaked-metadata", f"claim {uid}") for uid in sorted(hw.metadata_uids - prepared)),
            *(
                ("leaked-gpu-setting", f"GPU {uuid}: {', '.join(what)}")
                for uuid, what in sorted(hw.gpu_settings.items())
                if not configured
            ),
            *(("leaked-mps-daemon", f"GPU {bus}") for bus in hw.mps_daemons if not configured),
        ]
        for kind, detail in leaks_now:
            if tracker.held(f"{kind}:{node.name}:{detail}", view.at, leak_grace):
                out.append(Violation(kind, f"{node.name}: {detail}"))
    return out


def check(
    view: ClusterView,
    tracker: Tracker,
    settled: set[str],
    *,
    leak_grace: float = 120,
    pending_grace: float = 120,
    hw_grace: float = 60,
    afu: str = "",
) -> list[Violation]:
    """Every invariant of the module doc on one observation."""
    out = [
        *double_allocations(view),
        *acknowledged_lost(view, settled),
        *leaks(view, tracker, leak_grace),
        *pods_without_reason(view, tracker, pending_grace),
        *hardware(view, tracker, settled, leak_grace=leak_grace, hw_grace=hw_grace, afu=afu),
    ]
    tracker.forget_untouched()
    return out


def pod_outcomes(view: ClusterView) -> Counter[str]:
    """What the workload sees: pods by phase and, when not Running, reason."""
    out: Counter[str] = Counter()
    for pod in view.pods:
        phase = (pod.get("status") or {}).get("phase") or "Pending"
        out[phase if phase == "Running" else f"{phase}:{pod_reason(pod) or '?'}"] += 1
    return out
