"""A GPU's sharing strategy belongs to the admin: who may set it, and who may join it.

A ``GpuConfig`` sharing strategy (TimeSlicing, MPS) changes the GPU itself (compute mode, time
slice, the MPS control daemon: :mod:`.applied`). On a memory-shared GPU every share runs on
that setting, so a share's strategy must come from the DeviceClass the admin wrote (opaque
config ``source: FromClass``; an ``MPS`` or ``TimeSliced`` AcceleratorPolicy's class carries
one), never from the tenant's own claim, and a share joins a GPU only on the strategy the GPU
runs: no strategy-less share onto an MPS GPU (it would run without the MPS pipe and outside
the MPS limits), no MPS share onto a GPU that strategy-less shares use (it would switch the
GPU to EXCLUSIVE_PROCESS under them). See docs/security.md, "Sharing strategies".
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.sharing.applied import GpuWant, describe_entry
from kubeacc.crds.opaque import SharingStrategy


def claim_strategy_problem(device: str, strategy: str) -> str:
    """The refusal of a claim's own strategy for a share of a memory-shared GPU."""
    return (
        f"device {device} is a share of a memory-shared GPU: its sharing strategy comes from "
        f"the DeviceClass (opaque config source FromClass), not from the claim ({strategy} "
        "asked in the claim's own GpuConfig would change the GPU for every claim sharing it)"
    )


def join_problem(
    uid: str,
    claim: PreparedClaim,
    wants: Sequence[GpuWant],
    applied: Mapping[str, Mapping[str, Any]],
    others: Iterable[tuple[str, PreparedClaim]],
) -> str | None:
    """Why a share of ``claim`` cannot join its GPU on the strategy it runs; None: it can.

    ``applied``: the strategies on the GPUs (:attr:`AppliedSharing.gpus`, by bus id);
    ``others``: the claims prepared on this node (uid, claim).
    """
    users: dict[str, list[str]] = {}
    others = list(others)
    namespaces = {other_uid: other.namespace for other_uid, other in others}
    for other_uid, other in others:
        if other_uid != uid:
            for d in other.devices:
                if d.share_id:
                    users.setdefault(d.device, []).append(other_uid)
    for d in claim.devices:
        if not d.share_id:
            continue
        want = next((w for w in wants if w.device == d.device), None)
        entry = next((e for e in applied.values() if e.get("device") == d.device), None)
        on_strategy = [c for c in (entry or {}).get("claims", []) if c != uid]
        if want is None and on_strategy:
            assert entry is not None
            return (
                f"GPU {d.device} runs {describe_entry(entry)} for claim(s) "
                f"{', '.join(on_strategy)}; this share runs no strategy (its DeviceClass sets "
                "none): a share joins a GPU only on the strategy the GPU runs"
            )
        if want is not None and want.strategy is SharingStrategy.MPS:
            foreign = {namespaces[c] for c in on_strategy if c in namespaces} - {claim.namespace}
            if foreign:
                return (
                    f"GPU {d.device} runs MPS for namespace(s) {', '.join(sorted(foreign))}: "
                    "its one MPS control daemon serves every client and any of them can command "
                    "it (quit), so a GPU serves the MPS shares of one namespace at a time"
                )
        plain = [c for c in users.get(d.device, []) if c not in on_strategy]
        if want is not None and plain:
            return (
                f"GPU {d.device} is shared by claim(s) {', '.join(plain)} with no strategy; "
                f"this share's {want.describe()} would change the GPU under them"
            )
    return None
