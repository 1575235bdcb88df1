"""Is an allocation the engine made one that kube-scheduler could make? Asked of the scheduler.

The scenario is *pinned* to the allocation: slices keep only the chosen devices (and the
devices existing claims hold, so their counters and capacity still count), each
``firstAvailable`` request becomes the chosen subrequest, constraints name what was chosen. The
Go allocator then has to allocate the pinned claim (a pod's pinned claims, together) on the same
node: it can only use the chosen devices, so success means they satisfy every rule the scheduler
applies. No engine code is used.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from typing import Any


def pinned_scenario(
    scenario: Mapping[str, Any], claim: Mapping[str, Any], node: str, allocation: Mapping[str, Any]
) -> dict[str, Any]:
    """The scenario pinned to one claim's allocation (the claim a pod of its own)."""
    out = pinned_pod(scenario, [claim], node, [allocation])
    del out["pods"]
    return out


def pinned_pod(
    scenario: Mapping[str, Any],
    claims: Sequence[Mapping[str, Any]],
    node: str,
    allocations: Sequence[Mapping[str, Any]],
) -> dict[str, Any]:
    """The scenario pinned to a pod's allocations (one per claim, in order): the devices any
    of them chose stay, every claim is pinned to its own choice, and the pod is the only one."""
    keep = {
        (r["driver"], r["pool"], r["device"])
        for allocation in allocations
        for r in allocation["devices"]["results"]
    }
    for old in scenario.get("allocated", []):
        for r in old["status"]["allocation"]["devices"]["results"]:
            keep.add((r["driver"], r["pool"], r["device"]))
    slices = []
    for s in scenario["slices"]:
        s2 = copy.deepcopy(s)
        spec = s2["spec"]
        if "devices" in spec:
            spec["devices"] = [
                d
                for d in spec["devices"]
                if (spec["driver"], spec["pool"]["name"], d["name"]) in keep
            ]
        slices.append(s2)
    pinned = [
        _pin(claim, allocation) for claim, allocation in zip(claims, allocations, strict=True)
    ]
    nodes = [n for n in scenario["nodes"] if n["metadata"]["name"] == node]
    return {
        **scenario,
        "slices": slices,
        "claims": pinned,
        "nodes": nodes,
        "pods": [list(range(len(pinned)))],
    }


def _pin(claim: Mapping[str, Any], allocation: Mapping[str, Any]) -> dict[str, Any]:
    """The claim with each firstAvailable request replaced by the subrequest chosen."""
    chosen = {r["request"] for r in allocation["devices"]["results"]}
    c2 = copy.deepcopy(dict(claim))
    devices = c2["spec"]["devices"]
    renamed: dict[str, str] = {}
    for i, req in enumerate(devices["requests"]):
        for sub in req.get("firstAvailable") or []:
            full = f"{req['name']}/{sub['name']}"
            if full in chosen:
                body = {k: v for k, v in sub.items() if k != "name"}
                devices["requests"][i] = {"name": req["name"], "exactly": body}
                renamed[full] = req["name"]
    constraints = []
    for con in devices.get("constraints") or []:
        names = con.get("requests")
        if names:
            kept = sorted({renamed.get(n, n) for n in names if "/" not in n or n in renamed})
            if not kept:
                continue
            constraints.append({**con, "requests": kept})
        else:
            constraints.append(con)
    if constraints:
        devices["constraints"] = constraints
    else:
        devices.pop("constraints", None)
    return c2
