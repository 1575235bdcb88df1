"""kubeacc extender on the real testbed: two nodes (``gpu-a``: 2 NVIDIA L4, ``gpu-b``: 1 L4;
23034 MiB each, shared through the node agents' device plugins), the real kube-scheduler
configured with the extender (KubeSchedulerConfiguration ``extenders``), real kubelets calling
Allocate.

Per node: the node agent (process) and the life-cycle agent (thread; it publishes the
Accelerators the extender reads). The extender runs as a process with the token of its
ServiceAccount and the RBAC of deploy/rbac/extender.yaml. Tests run in order and clean up
their pods.
"""

from __future__ import annotations

import contextlib
import json
import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Node, Pod

from kubeacc.contracts.names import DECISION_ANNOTATION
from kubeacc.contracts.wants import MEMORY, Decision
from kubeacc.crds.deploy import manifests
from kubeacc.crds.resources import as_dict
from kubeacc.extender.namelists import KEEP
from tests.extender.clusterlib import Cluster, Extender, extender_cluster, limits_pod
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

NODES = ("gpu-a", "gpu-b")
PROFILES = {"gpu-a": "l4-pair", "gpu-b": "edge-mixed"}
GPUS = 3
L4_MIB = 23034
NS = "shares"


@pytest.fixture(scope="module")
def cluster(
    tmp_path_factory: pytest.TempPathFactory, request: pytest.FixtureRequest
) -> Iterator[Cluster]:
    with extender_cluster(
        tmp_path_factory.mktemp("extender"),
        request,
        plugin_nodes=PROFILES,
        dp_config="types:\n  gpu: {shared: true}\n",
        gpus=GPUS,
        namespace=NS,
    ) as cluster:
        for node in NODES:
            mib = L4_MIB * (2 if PROFILES[node] == "l4-pair" else 1)
            eventually(
                lambda n=node, m=mib: _allocatable(cluster.client, n).get(MEMORY) == str(m),  # type: ignore[misc]
                90,
                f"{MEMORY} on {node}",
            )
        _EXTENDER[:] = [cluster.extender]
        yield cluster


@pytest.fixture
def kube(cluster: Cluster) -> Iterator[Client]:
    yield cluster.client
    for p in cluster.client.list(Pod, namespace=NS):
        assert p.metadata is not None and p.metadata.name is not None
        cluster.client.delete(Pod, p.metadata.name, namespace=NS, grace_period=0)
    eventually(lambda: not list(cluster.client.list(Pod, namespace=NS)), 60, "pods gone")
    # The next test's first pod must meet an extender that has seen these deletions too: a pod
    # it refuses on a stale view is re-queued by kube-scheduler only on a later cluster event
    # that concerns it (or after minutes), see docs/extender.md "Stale refusals".
    eventually(
        lambda: not any(cluster.extender.holders(n) for n in NODES), 30, "extender saw them go"
    )


def _allocatable(client: Client, node: str) -> dict[str, str]:
    status = client.get(Node, node).status
    return dict(status.allocatable or {}) if status else {}


def _pod(name: str, limits: dict[str, str], **spec: Any) -> Any:
    return limits_pod(name, NS, limits, **spec)


def _get(client: Client, name: str) -> dict[str, Any]:
    return as_dict(client.get(Pod, name, namespace=NS))


def _phase(client: Client, name: str) -> str:
    return str((_get(client, name).get("status") or {}).get("phase") or "")


def _unschedulable(client: Client, name: str) -> str | None:
    for c in (_get(client, name).get("status") or {}).get("conditions") or []:
        if c["type"] == "PodScheduled" and c["status"] == "False":
            return str(c.get("message") or c.get("reason"))
    return None


def _running(client: Client, names: list[str], timeout: float = 120) -> None:
    _running_count(client, names, len(names), timeout)


def _running_count(client: Client, names: list[str], count: int, timeout: float = 120) -> None:
    """Wait until ``count`` of ``names`` run; on time-out, say where each pod stands."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if sum(_phase(client, n) == "Running" for n in names) == count:
            return
        time.sleep(0.5)
    report = {
        n: (_phase(client, n), _get(client, n)["spec"].get("nodeName"), _unschedulable(client, n))
        for n in names
    }
    views = {}
    for node in NODES:
        try:
            views[node] = _EXTENDER[0].state(node) if _EXTENDER else "no extender"
        except OSError as err:
            views[node] = str(err)
    process = ""
    if _EXTENDER and (proc := _EXTENDER[0].proc) is not None:
        process = f"; extender process: exit {proc.poll()}, log tail:\n{_EXTENDER[0].log()[-3000:]}"
    raise AssertionError(
        f"not {count} of {names} Running after {timeout}s: {report}; extender: {views}{process}"
    )


#: The extender (set by the fixture), for failure reports.
_EXTENDER: list[Extender] = []


def _decision(client: Client, name: str) -> Decision:
    pod = _get(client, name)
    decision = Decision.from_json(pod["metadata"]["annotations"][DECISION_ANNOTATION])
    assert decision.node == pod["spec"]["nodeName"]
    return decision


def _held(client: Client) -> dict[tuple[str, str], int]:
    """MiB decided per (node, GPU) over the pods that run or are bound."""
    held: dict[tuple[str, str], int] = {}
    for p in client.list(Pod, namespace=NS):
        d = as_dict(p)
        if not d["spec"].get("nodeName"):
            continue
        decision = _decision(client, d["metadata"]["name"])
        for c in decision.containers:
            for bdf in c.devices:
                held[(decision.node, bdf)] = held.get((decision.node, bdf), 0) + c.memory
    return held


def test_memory_shares_pack_onto_gpus_without_exceeding_them(
    cluster: Cluster, kube: Client
) -> None:
    names = [f"share-{i}" for i in range(4)]
    for n in names:
        kube.create(_pod(n, {MEMORY: "15000", "kubeacc.io/gpu-cores": "30"}))
    # one 15000 MiB share per L4 (23034 MiB): three run. The fourth fits gpu-a's total
    # (46068 MiB, what kube-scheduler checks) but no single GPU: the extender says so.
    _running_count(kube, names, GPUS)
    waiting = [n for n in names if _phase(kube, n) != "Running"]
    assert len(waiting) == 1
    reason = eventually(lambda: _unschedulable(kube, waiting[0]), 60, "unschedulable reason")
    assert "no GPU with 15000 MiB free (most free on one GPU: 8034 MiB)" in reason, reason
    held = _held(kube)
    assert sorted(held.values()) == [15000] * GPUS, held
    # what the containers got: the decided GPU, the limits as environment
    for n in names:
        if n in waiting:
            continue
        decision = _decision(kube, n)
        node = cluster.testbed.node(decision.node)
        (record,) = node.container_records(namespace=NS, pod=n)
        assert record.envs["ACCELERATOR_UNITS"] == decision.containers[0].devices[0]
        assert record.envs["KUBEACC_DEVICE_MEMORY_LIMIT"] == "15000"
        assert record.envs["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=15000M"
        assert record.envs["KUBEACC_DEVICE_CORES_LIMIT"] == "30"
        assert record.envs["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "30"
        assert any(d.host_path.startswith("/dev/nvidia") for d in record.devices)
    # memory freed: the waiting pod is placed
    gone = next(n for n in names if n not in waiting)
    kube.delete(Pod, gone, namespace=NS, grace_period=0)
    _running(kube, waiting)


def test_prioritize_gets_back_the_names_filter_answered(cluster: Cluster, kube: Client) -> None:
    """kube-scheduler (Go) sends prioritize filter's node names byte for byte as the
    extender encoded them, so the extender takes its own list back (namelists.py)."""
    # fill the kept lists with empty answers, which no scheduler's filter sends: a list taken
    # back below is then one of the scheduler's filter answers, given back by prioritize
    share = {"spec": {"containers": [{"name": "c", "resources": {"limits": {MEMORY: "1"}}}]}}
    for i in range(KEEP):
        assert cluster.extender.post("filter", {"Pod": share, "NodeNames": [f"x{i}"]})
    before = cluster.extender.counts()
    kube.create(_pod("reuse", {MEMORY: "1000"}))
    _running(kube, ["reuse"])
    after = cluster.extender.counts()
    assert after["prioritize"] > before["prioritize"], (before, after)
    assert after["names_reused"] > before["names_reused"], (before, after)


def test_extender_restart_mid_stream_loses_nothing(cluster: Cluster, kube: Client) -> None:
    ext = cluster.extender
    names = [f"r-{i}" for i in range(2 * GPUS + 1)]
    kube.create(_pod(names[0], {MEMORY: "11000"}))
    kube.create(_pod(names[1], {MEMORY: "11000"}))
    _running(kube, names[:2])
    kube.create(_pod(names[2], {MEMORY: "11000"}))
    ext.kill()  # whatever it was doing with r-2
    for n in names[3:]:
        kube.create(_pod(n, {MEMORY: "11000"}))
    ext.start()  # a new process: state only from the API server
    # two 11000 MiB shares per L4: six run, the seventh waits
    _running_count(kube, names, 2 * GPUS)
    late = [n for n in names if _phase(kube, n) != "Running"]
    assert len(late) == 1
    eventually(lambda: _unschedulable(kube, late[0]), 60, "reason for the last pod")
    held = _held(kube)
    assert sorted(held.values()) == [22000] * GPUS, held


def test_whole_gpus_and_shares_never_meet_on_one_gpu(cluster: Cluster, kube: Client) -> None:
    kube.create(_pod("whole-2", {"kubeacc.io/gpu": "2"}))
    _running(kube, ["whole-2"])
    whole = _decision(kube, "whole-2")
    assert whole.node == "gpu-a" and whole.containers[0].whole
    (record,) = cluster.testbed.node("gpu-a").container_records(namespace=NS, pod="whole-2")
    assert sorted(record.envs["ACCELERATOR_UNITS"].split(",")) == sorted(
        whole.containers[0].devices
    )
    assert "KUBEACC_DEVICE_MEMORY_LIMIT" not in record.envs
    # gpu-a's memory is free by the kubelet's count, but both its GPUs are taken whole
    kube.create(_pod("share-after", {MEMORY: "1000"}))
    _running(kube, ["share-after"])
    assert _decision(kube, "share-after").node == "gpu-b"
    kube.create(_pod("share-more", {MEMORY: "23000"}))
    reason = eventually(lambda: _unschedulable(kube, "share-more"), 60, "reason")
    assert "no GPU takes shares (all held whole or unhealthy)" in reason, reason
    # gpu-b (one L4 with 1000 MiB given): kube-scheduler's own count refuses it first
    assert "1 Insufficient kubeacc.io/gpu-memory" in reason, reason


def test_racing_binds_for_the_last_memory_one_wins(cluster: Cluster, kube: Client) -> None:
    # Bypass kube-scheduler (another scheduler name) and race two binds to the same node.
    for n in ("race-a", "race-b"):
        kube.create(_pod(n, {MEMORY: "15000"}, schedulerName="nobody"))
    node = "gpu-b"  # one L4: room for one of the two
    answers: dict[str, dict[str, Any]] = {}
    barrier = threading.Barrier(2)

    def bind(name: str) -> None:
        uid = _get(kube, name)["metadata"]["uid"]
        barrier.wait()
        answers[name] = cluster.extender.post(
            "bind", {"PodName": name, "PodNamespace": NS, "PodUID": uid, "Node": node}
        )

    threads = [threading.Thread(target=bind, args=(n,)) for n in ("race-a", "race-b")]
    for t in threads:
        t.start()
    for t in threads:
        t.join(60)
    errors = {n: a["Error"] for n, a in answers.items() if a["Error"]}
    assert len(answers) == 2 and len(errors) == 1, answers
    ((loser, error),) = errors.items()
    winner = "race-b" if loser == "race-a" else "race-a"
    assert "no GPU with 15000 MiB free" in error and "taken since filter" in error, error
    assert not _get(kube, loser)["spec"].get("nodeName")
    _running(kube, [winner])
    assert _decision(kube, winner).node == node


def test_a_pod_without_a_decision_gets_a_clear_allocate_error(
    cluster: Cluster, kube: Client
) -> None:
    # nodeName set by hand: no scheduler, no extender, no decision
    kube.create(_pod("no-decision", {MEMORY: "1000"}, nodeName="gpu-b"))

    def failed() -> str | None:
        status = _get(kube, "no-decision").get("status") or {}
        return str(status.get("message")) if status.get("phase") == "Failed" else None

    message = eventually(failed, 60, "pod refused at admission")
    assert "no kubeacc extender decision" in message, message


def test_deploy_manifests_are_accepted(cluster: Cluster) -> None:
    # server-side validation of deploy/extender.yaml and its RBAC, nothing written
    for name in ("extender.yaml", "rbac/extender.yaml"):
        for doc in manifests(name):
            cluster.client.apply(from_dict(doc), force=True, dry_run=True)


def test_only_kube_scheduler_reaches_the_extender(cluster: Cluster, kube: Client) -> None:
    """Issue 23: whoever reaches the extender's port without kube-scheduler's certificate
    cannot bind a pod (the extender would bind it with its own rights), and a 63 MB body is
    refused before it is read; the victim's pod keeps running."""
    import http.client
    import socket
    import ssl

    kube.create(_pod("victim", {MEMORY: "1000"}))
    eventually(lambda: _phase(kube, "victim") == "Running", 90, "victim Running")
    kube.create(_pod("intruder", {MEMORY: "1000"}, schedulerName="nobody"))
    uid = _get(kube, "intruder")["metadata"]["uid"]
    bind = json.dumps(
        {"PodName": "intruder", "PodNamespace": NS, "PodUID": uid, "Node": NODES[0]}
    ).encode()
    port = cluster.extender.port
    # plain HTTP on the TLS port
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /bind HTTP/1.1\r\nContent-Length: %d\r\n\r\n" % len(bind) + bind)
        s.settimeout(10)
        with contextlib.suppress(OSError):
            assert b"200 OK" not in s.recv(4096)
    # TLS that trusts the extender but has no client certificate
    anonymous = ssl.create_default_context(cafile=str(cluster.extender.pki.ca))
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=anonymous, timeout=10)
    with pytest.raises((ssl.SSLError, ConnectionError, http.client.HTTPException)):
        conn.request("POST", "/bind", bind)
        conn.getresponse().read()
    conn.close()
    # even kube-scheduler's certificate cannot make it read 63 MB
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=cluster.extender.tls, timeout=10)
    conn.putrequest("POST", "/filter")
    conn.putheader("Content-Length", str(63 << 20))
    conn.endheaders()
    assert conn.getresponse().status == 413
    conn.close()
    assert not _get(kube, "intruder")["spec"].get("nodeName")
    assert _phase(kube, "victim") == "Running"
