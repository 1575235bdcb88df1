"""The second fence against a tenant who edits the decision of its own running pod.

Without the admission policy (docs/security.md, "Placement decisions") a namespace user with
``edit`` may remove or change the annotation ``kubeacc.io/devices`` of its pods. The extender's
record of the decision, the pod condition ``kubeacc.io/Decided`` (``pods/status``: not the
tenant's to write), counts instead; a decision once counted for a bound pod keeps counting
until the pod finishes or goes; the device plugin hands out the record and counts what it
handed out. The same on the real testbed: tests/extender/test_tenancy.py
(``test_without_the_policy_a_decision_the_tenant_removes_still_counts``, ``..._changes_...``).
"""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kubeacc.contracts.names import DECISION_ANNOTATION, DECISION_CONDITION
from kubeacc.contracts.trusted import decision_condition, trusted_decision
from kubeacc.contracts.wants import MEMORY, Assigned, Decision
from kubeacc.deviceplugin.allocation import AllocationError
from kubeacc.deviceplugin.shared import DecisionLookup, Kind, shared_allocate
from kubeacc.extender import kept
from kubeacc.extender.state import State
from kubeacc.model import Device, DeviceType
from tests.extender.helpers import pod, share, small_gpu, state_with
from tests.hosts import HostFactory, discover

A, B = "0000:01:00.0", "0000:02:00.0"
L4 = 23034


def _recorded(p: dict[str, Any], decision: Decision) -> dict[str, Any]:
    """``p`` with the extender's record of ``decision`` in its status."""
    out = copy.deepcopy(p)
    out["status"]["conditions"] = [decision_condition(decision)]
    return out


def _annotated(p: dict[str, Any], decision: Decision | None) -> dict[str, Any]:
    """``p`` with its annotation removed (None) or set to ``decision``, as a tenant edits it."""
    out = copy.deepcopy(p)
    notes = out["metadata"]["annotations"]
    notes.pop(DECISION_ANNOTATION, None)
    if decision is not None:
        notes[DECISION_ANNOTATION] = decision.to_json()
    return out


def _used(state: State) -> dict[str, int]:
    view = state.node("n1")
    assert view is not None
    return {bdf: u.memory for bdf, u in view.use.items()}


# -- what counts --------------------------------------------------------------------------
def test_the_record_is_the_decision_whatever_the_annotation_says() -> None:
    mine = share("n1", A, 20000)
    p = _recorded(pod("mine", {MEMORY: "20000"}, node="n1", decision=mine), mine)
    assert trusted_decision(p) == (mine, None)
    got, note = trusted_decision(_annotated(p, None))
    assert got == mine and note is not None and "removed" in note, note
    got, note = trusted_decision(_annotated(p, share("n1", B, 20000)))
    assert got == mine and note is not None and "changed" in note, note
    # the record passes the same consistency checks as an annotation
    wrong = share("n1", A, 1)
    got, note = trusted_decision(_recorded(_annotated(p, None), wrong))
    assert got is None and note is not None and "asks for 20000 MiB" in note, note
    # a pod without a record (decided before the record existed): its annotation
    legacy = pod("old", {MEMORY: "20000"}, node="n1", decision=mine)
    assert trusted_decision(legacy) == (mine, None)


def test_the_extenders_cache_keeps_the_record() -> None:
    mine = share("n1", A, 20000)
    p = _annotated(_recorded(pod("mine", {MEMORY: "20000"}, node="n1", decision=mine), mine), None)
    p["status"]["conditions"].append({"type": "Ready", "status": "True"})
    cut = kept.pod(p)
    assert [c["type"] for c in cut["status"]["conditions"]] == [DECISION_CONDITION]
    assert trusted_decision(cut)[0] == trusted_decision(p)[0] == mine


# -- the extender's state -----------------------------------------------------------------
@pytest.mark.parametrize("record", [True, False], ids=["recorded", "annotation-only"])
def test_a_bound_pod_keeps_its_decision_when_the_tenant_edits_it(record: bool) -> None:
    state = state_with({"n1": [small_gpu(A, L4), small_gpu(B, L4)]})
    mine = share("n1", A, 20000)
    p = pod("mine", {MEMORY: "20000"}, node="n1", decision=mine, phase="Running")
    if record:
        p = _recorded(p, mine)
    state.pod_event(None, p)
    assert _used(state) == {A: 20000, B: 0}
    removed = _annotated(p, None)
    state.pod_event(p, removed)
    assert _used(state) == {A: 20000, B: 0}
    changed = _annotated(p, share("n1", B, 20000))
    state.pod_event(removed, changed)
    assert _used(state) == {A: 20000, B: 0}
    state.set_pods([changed])  # a relist (a watch that expired meanwhile)
    assert _used(state) == {A: 20000, B: 0}
    # until the pod finishes, or goes
    done = copy.deepcopy(changed)
    done["status"]["phase"] = "Succeeded"
    state.pod_event(changed, done)
    assert _used(state) == {A: 0, B: 0}
    state.pod_event(None, changed)
    state.pod_event(changed, None)
    assert _used(state) == {A: 0, B: 0}


def test_a_restarted_extender_counts_the_record() -> None:
    """Memory is not the only keeper: a new extender (or replica) rebuilds from the record."""
    mine = share("n1", A, 20000)
    p = _recorded(pod("mine", {MEMORY: "20000"}, node="n1", decision=mine), mine)
    for edited in (_annotated(p, None), _annotated(p, share("n1", B, 20000))):
        state = state_with({"n1": [small_gpu(A, L4), small_gpu(B, L4)]})
        state.set_pods([edited])
        assert _used(state) == {A: 20000, B: 0}
        fresh = State()
        fresh.set_inventory({"n1": [small_gpu(A, L4), small_gpu(B, L4)]})
        fresh.pod_event(None, edited)
        assert _used(fresh) == {A: 20000, B: 0}


# -- the device plugin --------------------------------------------------------------------
def _l4s(hosts: HostFactory) -> dict[str, Device]:
    inv = discover(hosts.pristine("l4-pair"), nvml="on")
    return {d.pci_bus_id: d for d in inv.by_type(DeviceType.GPU) if d.pci_bus_id}


def _dp_pod(name: str, decision: Decision, record: bool) -> dict[str, Any]:
    p = pod(name, {MEMORY: "20000"}, node="node-a", decision=decision)
    p["spec"]["containers"][0]["name"] = "main"
    return _recorded(p, decision) if record else p


def _decided(bdf: str, at: float = 1.0) -> Decision:
    return Decision("node-a", (Assigned("main", (bdf,), memory=20000),), at=at)


def test_the_device_plugin_hands_out_the_record_not_the_tenants_edit(hosts: HostFactory) -> None:
    gpus = _l4s(hosts)
    held, other = sorted(gpus)
    mine = _decided(held)
    # changed before the kubelet's Allocate: the container still gets the GPU decided for it
    pods = [_annotated(_dp_pod("mine", mine, record=True), _decided(other))]
    lookup = DecisionLookup("node-a", lambda: pods)
    found = lookup.find(MEMORY, Kind.MEMORY, 20000, gpus)
    assert found.devices == (held,)
    assert shared_allocate(Kind.MEMORY, found, gpus, None).envs["ACCELERATOR_UNITS"] == held


@pytest.mark.parametrize("record", [True, False], ids=["recorded", "annotation-only"])
@pytest.mark.parametrize("edit", ["removed", "changed"])
def test_the_device_plugin_counts_what_it_handed_out(
    hosts: HostFactory, record: bool, edit: str
) -> None:
    """A share served, then its pod's decision edited: the GPU still has its 20,000 MiB in
    use, so a second 20,000 MiB share decided onto it (an extender that forgot) is refused."""
    gpus = _l4s(hosts)
    held, other = sorted(gpus)
    pods = [_dp_pod("mine", _decided(held), record)]
    lookup = DecisionLookup("node-a", lambda: pods)
    shared_allocate(Kind.MEMORY, lookup.find(MEMORY, Kind.MEMORY, 20000, gpus), gpus, None)
    pods[0] = _annotated(pods[0], None if edit == "removed" else _decided(other))
    pods.append(_dp_pod("victim", _decided(held, at=2.0), True))
    with pytest.raises(AllocationError, match="do not fit next to the 20000 MiB held"):
        lookup.find(MEMORY, Kind.MEMORY, 20000, gpus)


def test_a_pod_recreated_under_its_name_gets_its_own_decision(hosts: HostFactory) -> None:
    """What was handed out is forgotten with the pod: a new pod of the same name (a
    StatefulSet's, or a tenant's) is served, and the GPU's room is its own again."""
    gpus = _l4s(hosts)
    held, _ = sorted(gpus)
    first = _dp_pod("mine", _decided(held), record=True)
    pods = [first]
    lookup = DecisionLookup("node-a", lambda: pods)
    shared_allocate(Kind.MEMORY, lookup.find(MEMORY, Kind.MEMORY, 20000, gpus), gpus, None)
    again = _dp_pod("mine", _decided(held, at=2.0), record=True)
    again["metadata"]["uid"] = "uid-mine-2"
    pods[0] = again
    found = lookup.find(MEMORY, Kind.MEMORY, 20000, gpus)
    assert (found.pod, found.devices) == ("default/mine", (held,))
    # gone, then back: the same
    pods.clear()
    with pytest.raises(AllocationError, match="no kubeacc extender decision"):
        lookup.find(MEMORY, Kind.MEMORY, 20000, gpus)
    pods.append(first)
    assert lookup.find(MEMORY, Kind.MEMORY, 20000, gpus).devices == (held,)
