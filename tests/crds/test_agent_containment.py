"""Containment of node agents by the real API server (deploy/admission + deploy/rbac).

Every identity deploy/rbac/agent.yaml grants agent rights to -- certificates in the group
kubeacc:agents (with and without a node in their name) and the agent service account's tokens
(bound to a pod, bound to a Node, not bound) -- tries every kind of write an agent can make
against every node's objects: all combinations, in a random order, with random pool
generations. Each is either accepted (its own node, a legitimate write) or refused with the
message that says why; the expectation comes from a small oracle, not from the policy.
"""

from __future__ import annotations

import contextlib
import os
import random
import re
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Event, Node, Pod
from lightkube.resources.resource_v1 import ResourceSlice
from lightkube.types import PatchType

from kubeacc.agent.dra.slices import GENERATION_STEP, SlicePublisher
from kubeacc.crds.api import API_VERSION, NODE_LABEL
from kubeacc.crds.deploy import manifests
from kubeacc.crds.resources import Accelerator, AcceleratorOperation
from kubeacc.testbed.identities import (
    AGENT_SA,
    AGENT_SA_NAMESPACE,
    agent_cert_client,
    cert_client,
    install_agent_access,
    token_client,
)
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import create_operation
from tests.testbed.helpers import eventually_refused

pytestmark = pytest.mark.cluster

#: Seed of the random choices (node names, generations, order); printed when the test fails.
SEED = int(os.environ.get("KUBEACC_CONTAINMENT_SEED", random.randrange(2**32)))
DEVICE = "gpu-0000-01-00-0"
GENERATION = 1000
STEP = GENERATION_STEP
UNBOUND = "without a node binding"
_DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$")


def acc_name(node: str, device: str = DEVICE) -> str:
    return f"{node}-{device}"


def slice_obj(
    name: str, node: str, pool: str, generation: int = GENERATION, driver: str = "kubeacc.io"
) -> Any:
    return from_dict(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name, "labels": {NODE_LABEL: node}},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": pool, "generation": generation, "resourceSliceCount": 1},
                "devices": [{"name": DEVICE}],
            },
        }
    )


def accelerator_body(name: str, node: str, device: str, label: str) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {"name": name, "labels": {NODE_LABEL: label}},
        "spec": {"node": node, "deviceName": device},
    }


def result(acc: str, node: str, phase: str = "Succeeded") -> dict[str, Any]:
    return {"accelerator": acc, "node": node, "phase": phase, "reason": phase}


@dataclass(frozen=True)
class Identity:
    label: str
    node: str | None  # the node the API server binds it to; None: no binding
    client: Client


@dataclass(frozen=True)
class World:
    """What the admin created: per node an Accelerator and a slice, one operation over all."""

    nodes: tuple[str, ...]
    namespace: str
    operation: str

    def op_base(self) -> dict[str, Any]:
        return {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": self.operation, "namespace": self.namespace},
        }


@dataclass(frozen=True)
class Case:
    """One write by ``who`` against ``target``'s objects."""

    kind: str
    who: Identity
    target: str
    write: Callable[[], Any]
    allowed: bool
    refusal: str  # what the refusal message must contain

    def __str__(self) -> str:
        return f"{self.kind} by {self.who.label} on node {self.target}"


# -- the writes ----------------------------------------------------------------------------------
# Each takes (client, me, target, world) and makes one dry-run write; ``me`` is the identity's
# node (for identities without one: the target, the most plausible write they could make).
Write = Callable[[Client, str, str, World], Any]


def _apply_acc(c: Client, body: dict[str, Any]) -> Any:
    name = body["metadata"]["name"]
    return c.patch(Accelerator, name, body, patch_type=PatchType.APPLY, force=True, dry_run=True)


def acc_create(c: Client, me: str, t: str, w: World) -> Any:
    return _apply_acc(
        c, accelerator_body(acc_name(t, "gpu-0000-c0-00-0"), t, "gpu-0000-c0-00-0", t)
    )


def acc_status(c: Client, me: str, t: str, w: World) -> Any:
    body = {**accelerator_body(acc_name(t), t, DEVICE, t), "status": {"hostDriver": "vfio-pci"}}
    return c.patch(
        Accelerator.Status, acc_name(t), body, patch_type=PatchType.APPLY, force=True, dry_run=True
    )


def acc_delete(c: Client, me: str, t: str, w: World) -> Any:
    return c.delete(Accelerator, acc_name(t), dry_run=True)


def acc_label(c: Client, me: str, t: str, w: World) -> Any:
    # Its own node's device, labelled as the target's: the target's agent would list it.
    return _apply_acc(
        c, accelerator_body(acc_name(me, "gpu-0000-c1-00-0"), me, "gpu-0000-c1-00-0", t)
    )


def acc_squat(c: Client, me: str, t: str, w: World) -> Any:
    # The name of the target's device, spelled as one of its own node's devices.
    name = acc_name(t, "gpu-0000-c2-00-0")
    return _apply_acc(c, accelerator_body(name, me, name[len(me) + 1 :], me))


def acc_cordon(c: Client, me: str, t: str, w: World) -> Any:
    return c.patch(
        Accelerator,
        acc_name(t),
        {"spec": {"cordoned": True}},
        patch_type=PatchType.MERGE,
        dry_run=True,
    )


def slice_create(c: Client, me: str, t: str, w: World) -> Any:
    return c.create(slice_obj(f"{t}-kubeacc.io-1", t, t), dry_run=True)


def slice_delete(c: Client, me: str, t: str, w: World) -> Any:
    return c.delete(ResourceSlice, f"{t}-kubeacc.io-0", dry_run=True)


def slice_squat(c: Client, me: str, t: str, w: World) -> Any:
    # Named like the target's slice, but of its own node and pool.
    return c.create(slice_obj(f"{t}-kubeacc.io-7", me, me), dry_run=True)


def slice_into_pool(c: Client, me: str, t: str, w: World) -> Any:
    return c.create(slice_obj(f"{me}-kubeacc.io-8", me, t), dry_run=True)


def slice_other_driver(c: Client, me: str, t: str, w: World) -> Any:
    return c.create(slice_obj(f"{t}-kubeacc.io-9", t, t, driver="gpu.example.com"), dry_run=True)


def slice_generation(delta: int) -> Write:
    def write(c: Client, me: str, t: str, w: World) -> Any:
        return c.patch(
            ResourceSlice,
            f"{t}-kubeacc.io-0",
            {"spec": {"pool": {"generation": GENERATION + delta}}},
            patch_type=PatchType.MERGE,
            dry_run=True,
        )

    return write


def _op_status(c: Client, w: World, status: dict[str, Any], patch_type: PatchType) -> Any:
    body = (
        {**w.op_base(), "status": status} if patch_type is PatchType.APPLY else {"status": status}
    )
    return c.patch(
        AcceleratorOperation.Status,
        w.operation,
        body,
        namespace=w.namespace,
        patch_type=patch_type,
        force=patch_type is PatchType.APPLY,
        dry_run=True,
    )


def op_result_as_me(c: Client, me: str, t: str, w: World) -> Any:
    # The attack: {accelerator: <target's device>, node: <me>}.
    return _op_status(c, w, {"results": [result(acc_name(t), me)]}, PatchType.APPLY)


def op_result_as_target(c: Client, me: str, t: str, w: World) -> Any:
    return _op_status(c, w, {"results": [result(acc_name(t), t)]}, PatchType.APPLY)


def op_results_replace(c: Client, me: str, t: str, w: World) -> Any:
    # A merge patch replaces the whole list: every other node's result goes.
    return _op_status(c, w, {"results": [result(acc_name(t), t)]}, PatchType.MERGE)


def op_message(c: Client, me: str, t: str, w: World) -> Any:
    return _op_status(c, w, {"message": f"{acc_name(t)}: done"}, PatchType.MERGE)


def op_phase(c: Client, me: str, t: str, w: World) -> Any:
    return _op_status(c, w, {"phase": "Succeeded"}, PatchType.MERGE)


def event_obj(namespace: str, name: str, node: str, op: str) -> Any:
    component = f"kubeacc-agent-{node}"
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Event",
            "metadata": {"name": name, "namespace": namespace},
            "involvedObject": {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorOperation",
                "name": op,
                "namespace": namespace,
            },
            "reason": "Reset",
            "message": f"{acc_name(node)}: reset",
            "type": "Normal",
            "source": {"component": component},
            "reportingComponent": component,
        }
    )


def event(c: Client, me: str, t: str, w: World) -> Any:
    obj = event_obj(w.namespace, f"new-{t}", t, w.operation)
    return c.create(obj, namespace=w.namespace, dry_run=True)


def event_update(c: Client, me: str, t: str, w: World) -> Any:
    return _patch_event(c, t, w, {"message": "nothing happened"})


def event_takeover(c: Client, me: str, t: str, w: World) -> Any:
    # The target's Event, re-attributed to itself.
    me_ = f"kubeacc-agent-{me}"
    return _patch_event(c, t, w, {"reportingComponent": me_, "source": {"component": me_}})


def _patch_event(c: Client, t: str, w: World, patch: dict[str, Any]) -> Any:
    return c.patch(
        Event,
        f"ev-{t}",
        patch,
        namespace=w.namespace,
        patch_type=PatchType.MERGE,
        dry_run=True,
    )


# -- the oracle ------------------------------------------------------------------------------


def _own(me: str, t: str) -> bool:
    return me == t


#: kind -> (write, allowed(me, target), refusal substring(me, target)) for bound identities.
Oracle = tuple[Write, Callable[[str, str], bool], Callable[[str, str], str]]


def _accs(me: str, t: str) -> str:
    return f"node agent {me} may only write Accelerators of node {me}"


def _slices(me: str, t: str) -> str:
    return f"node agent {me} may only write kubeacc.io ResourceSlices of node {me}"


def _results(me: str, t: str) -> str:
    return f"node agent {me} may only report results of its own node"


def _events(me: str, t: str) -> str:
    return f"may only report Events as kubeacc-agent-{me}"


def _controller(me: str, t: str) -> str:
    return "belongs to the controller"


def oracles(rng: random.Random) -> dict[str, Oracle]:
    table: dict[str, Oracle] = {
        "accelerator create": (acc_create, _own, _accs),
        "accelerator status": (acc_status, _own, _accs),
        "accelerator delete": (acc_delete, _own, _accs),
        "accelerator label": (
            acc_label,
            _own,
            lambda me, t: f"may only label its Accelerators kubeacc.io/node={me}",
        ),
        "accelerator cordon": (
            acc_cordon,
            lambda me, t: False,
            lambda me, t: "spec.cordoned is set by the controller" if me == t else _accs(me, t),
        ),
        "slice create": (slice_create, _own, _slices),
        "slice delete": (slice_delete, _own, _slices),
        "slice squat": (
            slice_squat,
            _own,
            lambda me, t: f"may only write ResourceSlices named {me}-kubeacc.io-<index>",
        ),
        "slice into pool": (
            slice_into_pool,
            _own,
            lambda me, t: f"may only publish into the pool of node {me}",
        ),
        "slice other driver": (
            slice_other_driver,
            lambda me, t: False,
            lambda me, t: "(driver gpu.example.com)",
        ),
        "result as me": (op_result_as_me, _own, _results),
        "result as target": (op_result_as_target, _own, _results),
        "results replaced": (
            op_results_replace,
            lambda me, t: False,
            lambda me, t: (
                "may not change or remove results of targets dispatched to other nodes"
                if me == t
                else _results(me, t)
            ),
        ),
        "operation message": (op_message, lambda me, t: False, _controller),
        "operation phase": (op_phase, lambda me, t: False, _controller),
        "event": (event, _own, _events),
        "event update": (event_update, _own, _events),
        "event takeover": (event_takeover, _own, _events),
    }
    # Pool generations: the edges of the rule and random steps.
    deltas = {-1, 0, 1, STEP, STEP + 1, *(rng.randint(-1000, 1000) for _ in range(3))}
    for d in sorted(deltas):
        table[f"slice generation {d:+d}"] = (
            slice_generation(d),
            lambda me, t, d=d: me == t and 0 <= d <= STEP,  # type: ignore[misc]
            lambda me, t: (
                "a pool generation never goes back and moves forward by at most"
                if me == t
                else _slices(me, t)
            ),
        )
    return table


def cases(identities: list[Identity], world: World, rng: random.Random) -> list[Case]:
    out = []
    for kind, (write, allowed, refusal) in oracles(rng).items():
        for who in identities:
            for t in world.nodes:
                me = who.node or t
                bound = who.node is not None
                out.append(
                    Case(
                        kind,
                        who,
                        t,
                        lambda w=write, c=who.client, me=me, t=t: w(c, me, t, world),
                        bound and allowed(me, t),
                        refusal(me, t) if bound else UNBOUND,
                    )
                )
    # Another node's device name spelled as one of its own: possible only where the target's
    # name extends the agent's and the rest is a DNS label (the CRD schema refuses the others).
    for who in identities:
        for t in world.nodes:
            me = who.node or t
            rest = acc_name(t, "gpu-0000-c2-00-0")[len(me) + 1 :]
            if who.node is not None and t.startswith(me + "-") and _DNS_LABEL.match(rest):
                out.append(
                    Case(
                        "accelerator squat",
                        who,
                        t,
                        lambda c=who.client, me=me, t=t: acc_squat(c, me, t, world),
                        False,
                        "is not a device name discovery produces",
                    )
                )
    rng.shuffle(out)
    return out


def check(case: Case) -> str | None:
    """None when the API server did what the oracle says; otherwise what went wrong."""
    try:
        case.write()
    except ApiError as exc:
        msg = str(exc.status.message)
        if case.allowed:
            return f"{case}: refused ({exc.status.code}): {msg}"
        if exc.status.code != 403 or case.refusal not in msg:
            return f"{case}: refused with {exc.status.code} {msg!r}, expected {case.refusal!r}"
        if "\n" in msg:
            return f"{case}: refusal is not one line: {msg!r}"
        return None
    return None if case.allowed else f"{case}: accepted, expected a refusal ({case.refusal})"


# -- set-up ----------------------------------------------------------------------------------


@contextlib.contextmanager
def fake_nodes(client: Client, names: tuple[str, ...]) -> Iterator[None]:
    """Node objects without a kubelet (unschedulable, tainted): tokens can be bound to them."""
    for name in names:
        client.create(
            from_dict(
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "metadata": {"name": name},
                    "spec": {
                        "unschedulable": True,
                        "taints": [{"key": "kubeacc.io/test", "effect": "NoSchedule"}],
                    },
                }
            )
        )
    try:
        yield
    finally:
        for name in names:
            with contextlib.suppress(ApiError):
                client.delete(Node, name)


@contextlib.contextmanager
def agent_pod(client: Client, node: str) -> Iterator[str]:
    """A pod of the agent's service account on ``node`` (what the DaemonSet makes)."""
    name = f"kubeacc-agent-{uuid.uuid4().hex[:6]}"
    client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": AGENT_SA_NAMESPACE},
                "spec": {
                    "nodeName": node,
                    "serviceAccountName": AGENT_SA,
                    "terminationGracePeriodSeconds": 0,
                    "containers": [{"name": "agent", "image": "registry.k8s.io/pause:3.10"}],
                },
            }
        )
    )
    try:
        yield name
    finally:
        client.delete(Pod, name, namespace=AGENT_SA_NAMESPACE, grace_period=0)


def fake_node_names(rng: random.Random) -> tuple[str, str]:
    """Two Node names, the second extending the first (so that the first node's agent can try
    names that look like the second's objects): ``cx-3f2a`` and ``cx-3f2a-gpu``, ``-kubeacc.io``,
    ``-0`` or ``.b``."""
    first = f"cx-{rng.randrange(16**4):04x}"
    return first, first + rng.choice(("-gpu", "-kubeacc.io", "-0", ".b", "-fpga-0000"))


def identities_from_rbac(
    testbed: Testbed, tmp: Path, pod: str, fake: tuple[str, ...]
) -> list[Identity]:
    """For every subject the agent ClusterRoleBinding names: identities with and without a
    node. A subject this test has no recipe for fails it: the policy must be checked for it."""
    (binding,) = [d for d in manifests("rbac/agent.yaml") if d["kind"] == "ClusterRoleBinding"]
    out: list[Identity] = []
    for subject in binding["subjects"]:
        kind, name = subject["kind"], subject["name"]
        if kind == "Group":
            for node in fake:
                user = f"system:kubeacc:agent:{node}"
                out.append(
                    Identity(
                        f"{user} ({name})", node, cert_client(testbed, tmp, user, (name,), "t")
                    )
                )
            for user in ("alice", "system:kubeacc:agent:"):
                out.append(
                    Identity(
                        f"{user} ({name})", None, cert_client(testbed, tmp, user, (name,), "t")
                    )
                )
        elif kind == "ServiceAccount":
            ns = subject["namespace"]
            sa = f"{ns}/{name}"
            out += [
                Identity(
                    f"{sa} bound to pod on {testbed.node_name}",
                    testbed.node_name,
                    token_client(
                        testbed, tmp, namespace=ns, account=name, bound_kind="Pod", bound_name=pod
                    ),
                ),
                Identity(
                    f"{sa} bound to Node {fake[0]}",
                    fake[0],
                    token_client(
                        testbed,
                        tmp,
                        namespace=ns,
                        account=name,
                        bound_kind="Node",
                        bound_name=fake[0],
                    ),
                ),
                Identity(
                    f"{sa} (unbound token)",
                    None,
                    token_client(testbed, tmp, namespace=ns, account=name),
                ),
            ]
        else:
            pytest.fail(f"no identity recipe for RBAC subject {subject}: extend this test")
    return out


def make_world(
    client: Client, nodes: tuple[str, ...], namespace: str, *, reported: bool = True
) -> World:
    """Per node an Accelerator and a slice; one Reset of them all, dispatched by "the
    controller" (and, when ``reported``, each node's Running result in)."""
    for node in nodes:
        body = accelerator_body(acc_name(node), node, DEVICE, node)
        client.patch(
            Accelerator, acc_name(node), body, patch_type=PatchType.APPLY, field_manager="t"
        )
        client.create(slice_obj(f"{node}-kubeacc.io-0", node, node))
    op = f"reset-{uuid.uuid4().hex[:5]}"
    for node in nodes:
        client.create(event_obj(namespace, f"ev-{node}", node, op), namespace=namespace)
    create_operation(
        client, namespace, op, {"action": "Reset", "targets": [acc_name(n) for n in nodes]}
    )
    world = World(nodes, namespace, op)
    client.patch(
        AcceleratorOperation.Status,
        op,
        {
            **world.op_base(),
            "status": {
                "phase": "Running",
                "message": "handed to the node agents",
                "dispatch": [
                    {"accelerator": acc_name(n), "node": n, "deviceName": DEVICE} for n in nodes
                ],
                "results": [result(acc_name(n), n, "Running") for n in nodes if reported],
            },
        },
        namespace=namespace,
        patch_type=PatchType.APPLY,
        field_manager="kubeacc-controller",
    )
    return world


@pytest.fixture
def cluster_world(
    testbed: Testbed, kubeacc_crds: None, kubeacc_cleanup: None, kube_client: Client, namespace: str
) -> Iterator[World]:
    install_agent_access(kube_client)
    fake = fake_node_names(random.Random(SEED))
    with fake_nodes(kube_client, fake):
        yield make_world(kube_client, (testbed.node_name, *fake), namespace)


def test_every_identity_every_node_every_write(
    testbed: Testbed, kube_client: Client, cluster_world: World, tmp_path: Path
) -> None:
    rng = random.Random(SEED + 1)
    fake = cluster_world.nodes[1:]
    with agent_pod(kube_client, testbed.node_name) as pod:
        identities = identities_from_rbac(testbed, tmp_path, pod, fake)
        # The policy is loaded a moment after it is created or changed.
        b = next(i for i in identities if i.node == fake[0])
        eventually_refused(lambda: acc_delete(b.client, "", testbed.node_name, cluster_world))
        all_cases = cases(identities, cluster_world, rng)
        failures = [f for f in map(check, all_cases) if f]
    kinds = {c.kind for c in all_cases}
    assert not failures, (
        f"seed {SEED}, nodes {fake}: {len(failures)} of {len(all_cases)} cases wrong:\n"
        + "\n".join(failures)
    )
    # Every kind was both refused and (except the never-allowed ones) accepted somewhere.
    assert {c.kind for c in all_cases if c.allowed} >= kinds - {
        "accelerator cordon",
        "accelerator squat",
        "slice other driver",
        "results replaced",
        "operation message",
        "operation phase",
        *(k for k in kinds if k.startswith("slice generation") and not _in_step(k)),
    }
    assert all(any(not c.allowed for c in all_cases if c.kind == k) for k in kinds)


def _in_step(kind: str) -> bool:
    return 0 <= int(kind.rsplit(" ", 1)[1]) <= STEP


def _refused(write: Callable[[], Any]) -> str:
    with pytest.raises(ApiError) as err:
        write()
    assert err.value.status.code == 403, err.value.status
    return str(err.value.status.message)


def test_the_reported_cross_node_attempts(
    testbed: Testbed,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    kube_client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    """Issue 11, "Cross-node identity", one by one, as real writes; the legitimate ones pass."""
    install_agent_access(kube_client)
    b, c, d = (agent_cert_client(testbed, n, tmp_path) for n in ("cx-b", "cx-c", "cx-d"))
    w = make_world(kube_client, ("cx-b", "cx-c"), namespace, reported=False)
    eventually_refused(lambda: acc_delete(b, "cx-b", "cx-c", w))

    def report(client: Client, acc: str, node: str) -> Any:
        body = {**w.op_base(), "status": {"results": [result(acc, node)]}}
        return client.patch(
            AcceleratorOperation.Status,
            w.operation,
            body,
            namespace=w.namespace,
            patch_type=PatchType.APPLY,
            field_manager=f"kubeacc-agent-{node}",
            force=True,
        )

    # B completes C's target under its own name: refused; C's own result then still lands.
    msg = _refused(lambda: report(b, acc_name("cx-c"), "cx-b"))
    assert "node agent cx-b may only report results of its own node" in msg
    assert f"(refused: {acc_name('cx-c')})" in msg
    # A forgery that got in before the policy was installed: C's agent replaces it.
    report(kube_client, acc_name("cx-c"), "cx-b")
    report(c, acc_name("cx-c"), "cx-c")
    report(b, acc_name("cx-b"), "cx-b")
    op = kube_client.get(AcceleratorOperation, w.operation, namespace=w.namespace)
    results = {r["accelerator"]: r["node"] for r in op.status["results"]}
    assert results == {acc_name("cx-c"): "cx-c", acc_name("cx-b"): "cx-b"}
    # Cyborg-backed Accelerators (<node>-cyborg-<resource provider>-<unit>, docs/cyborg.md): B
    # writes its own; C's is refused.
    cy = "cyborg-0123abcd-3"
    _apply_acc(b, accelerator_body(acc_name("cx-b", cy), "cx-b", cy, "cx-b"))
    theirs = accelerator_body(acc_name("cx-c", cy), "cx-c", cy, "cx-c")
    msg = _refused(lambda: _apply_acc(b, theirs))
    assert "cx-b" in msg, msg
    # B overwrites the operation's message: refused.
    msg = _refused(lambda: op_message(b, "cx-b", "cx-c", w))
    assert "status.message belongs to the controller" in msg

    # B squats D's slice name: refused; D's agent publishes its pool afterwards.
    msg = _refused(lambda: b.create(slice_obj("cx-d-kubeacc.io-0", "cx-b", "cx-b")))
    assert "named cx-b-kubeacc.io-<index>, not cx-d-kubeacc.io-0" in msg
    assert SlicePublisher(d, "cx-d").publish([{"name": DEVICE}])
    published = kube_client.get(ResourceSlice, "cx-d-kubeacc.io-0")
    assert published.spec.nodeName == "cx-d"
    assert published.spec.pool.generation == 1
    # B publishes into C's pool, with any generation: refused.
    msg = _refused(lambda: b.create(slice_obj("cx-b-kubeacc.io-5", "cx-b", "cx-c", 99)))
    assert "cx-b may only publish into the pool of node cx-b (spec.pool.name cx-c)" in msg
    msg = _refused(lambda: slice_generation(99)(b, "cx-b", "cx-c", w))
    assert "may only write kubeacc.io ResourceSlices of node cx-b (spec.nodeName cx-c)" in msg

    # Another member of the group: RBAC lets it in, the policy lets it write nothing.
    alice = cert_client(testbed, tmp_path, "alice", ("kubeacc:agents",), "alice")
    assert {a.metadata.name for a in alice.list(Accelerator)} >= {acc_name("cx-b")}
    msg = _refused(lambda: acc_status(alice, "cx-b", "cx-b", w))
    assert msg.endswith(
        "alice is a kubeacc node agent identity without a node binding (user "
        "system:kubeacc:agent:<node>, or a service-account token bound to a pod or Node): "
        "agent writes refused"
    ), msg


def test_policy_and_publisher_agree_on_the_generation_step() -> None:
    (policy,) = [
        d
        for d in manifests("admission/agent-node-restriction.yaml")
        if d["kind"] == "ValidatingAdmissionPolicy"
    ]
    variables = {v["name"]: v["expression"] for v in policy["spec"]["variables"]}
    assert int(variables["generationStep"]) == GENERATION_STEP
