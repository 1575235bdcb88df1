"""Which placement decisions count: only those consistent with the pod's own requests.

The decision annotation (``kubeacc.io/devices``) is written by the extender, and the API
server refuses it from anyone else (deploy/admission/extender-decisions.yaml). This is the
second fence, for a cluster installed without that policy or a decision written around it:
the extender counts, and the device plugin hands out, a decision only when it is one the
extender could have made for this pod (docs/security.md, "Placement decisions").

A decision is consistent when it names the node the pod is bound to, and every container it
lists is a container of the pod that asks for GPUs, and gets what it asks: as many whole GPUs
as it asks for whole GPUs (no memory, no cores), at least one whole GPU for a units request,
or a share of exactly one GPU with exactly the MiB and percent it asks for. Whether a share
fits its GPU is checked where the GPU is known (the extender's inventory, the device plugin).

The annotation is on the pod's metadata, which the pod's owner may edit: without the policy, a
tenant could remove it from its running pod (the extender forgot the GPU share it holds and
placed another namespace's share on top of it) or point it at another GPU. So the extender
also records the decision as a pod condition (:data:`DECISION_CONDITION`, written through
``pods/status``, which a namespace user cannot write), and where the pod has that record it is
the decision, whatever the annotation says. A pod without the record (decided by an extender
before this one) falls back to its annotation.
"""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

from kubeacc.contracts.names import DECISION_ANNOTATION, DECISION_CONDITION
from kubeacc.contracts.wants import (
    MAX_CORES,
    Assigned,
    ContainerWant,
    Decision,
    WantError,
    container_want,
    decision_of,
)


def decision_problem(pod: Mapping[str, Any], decision: Decision) -> str | None:
    """Why ``decision`` cannot be the extender's for ``pod``; None when it is consistent."""
    node = (pod.get("spec") or {}).get("nodeName")
    if node and decision.node != node:
        return f"decided for node {decision.node!r}, but the pod is bound to {node!r}"
    if not decision.containers:
        return "names no container"
    wants: dict[str, ContainerWant] = {}
    for c in (pod.get("spec") or {}).get("containers") or []:
        name = str(c.get("name", ""))
        try:
            want = container_want(name, c.get("resources"))
        except WantError as err:
            return str(err)
        if want is not None:
            wants[name] = want
    seen: set[str] = set()
    for got in decision.containers:
        if got.container in seen:
            return f"container {got.container!r} listed twice"
        seen.add(got.container)
        want = wants.get(got.container)
        if want is None:
            return f"container {got.container!r} asks for no GPU"
        problem = _assigned_problem(want, got)
        if problem:
            return f"container {got.container!r}: {problem}"
    return None


def _assigned_problem(want: ContainerWant, got: Assigned) -> str | None:
    if got.memory < 0 or got.cores < 0 or got.units < 0:
        return "negative memory, cores or units"
    if got.cores > MAX_CORES:
        return f"cores {got.cores} over {MAX_CORES}"
    if not got.devices or len(set(got.devices)) != len(got.devices):
        return "no GPU, or one GPU twice"
    if want.shared:
        if got.whole or len(got.devices) != 1:
            return "asks for a share of one GPU, decided whole GPUs"
        if (got.memory, got.cores) != (want.memory, want.cores):
            return (
                f"asks for {want.memory} MiB and {want.cores}% of a GPU, decided "
                f"{got.memory} MiB and {got.cores}%"
            )
        return None
    if not got.whole or got.memory or got.cores:
        return "asks for whole GPUs, decided a share"
    if want.units:
        return None if got.units == want.units else f"asks for {want.units} units"
    if len(got.devices) != want.whole or got.units:
        return f"asks for {want.whole} whole GPU(s), decided {len(got.devices)}"
    return None


def decision_condition(decision: Decision) -> dict[str, str]:
    """The pod condition recording ``decision`` (the extender's, written at bind)."""
    return {
        "type": DECISION_CONDITION,
        "status": "True",
        "reason": "Decided",
        "message": decision.to_json(),
        "lastTransitionTime": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
    }


def recorded_text(pod: Mapping[str, Any]) -> str | None:
    """The decision the extender recorded in the pod's status (its JSON); None: no record."""
    for c in (pod.get("status") or {}).get("conditions") or []:
        if isinstance(c, Mapping) and c.get("type") == DECISION_CONDITION:
            return str(c.get("message") or "") if c.get("status") == "True" else None
    return None


def trusted_decision(pod: Mapping[str, Any]) -> tuple[Decision | None, str | None]:
    """(the pod's decision when it counts, a note); (None, None): there is none.

    The note says why the decision does not count, or, beside a decision that counts, that
    the pod's annotation disagrees with the extender's record (which is what counts).
    """
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    annotated = annotations.get(DECISION_ANNOTATION)
    recorded = recorded_text(pod)
    if recorded is not None:
        try:
            decision = Decision.from_json(recorded)
        except WantError:
            return None, f"condition {DECISION_CONDITION} is not a kubeacc decision"
        problem = decision_problem(pod, decision)
        if problem:
            return None, f"{DECISION_CONDITION} refused: {problem}"
        if annotated != recorded and decision_of(pod) != decision:
            edit = "removed" if not annotated else "changed"
            return decision, (
                f"{DECISION_ANNOTATION} {edit} after the extender decided: its record "
                f"(condition {DECISION_CONDITION}) counts"
            )
        return decision, None
    if not annotated:
        return None, None
    legacy = decision_of(pod)
    if legacy is None:
        return None, f"{DECISION_ANNOTATION} is not a kubeacc decision"
    problem = decision_problem(pod, legacy)
    if problem:
        return None, f"{DECISION_ANNOTATION} refused: {problem}"
    return legacy, None
