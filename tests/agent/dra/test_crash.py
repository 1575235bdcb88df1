"""The agent SIGKILLed in the middle of prepare or unprepare, then restarted: the real kubelet's
retry ends with exactly one prepared copy (one CDI spec, one checkpoint entry) or none, and no
leftovers. The agent is stopped at a named point by the KUBEACC_AGENT_PAUSE_AT hook
(kubeacc/agent/dra/hooks.py), so every run kills it at the same moment."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.agent.dra import stale
from kubeacc.agent.dra.checkpoint import FILE_NAME, JOURNAL_NAME
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed

from ...testbed.helpers import eventually
from .agentproc import AgentProcess
from .test_e2e import claim_obj, gone, one_gpu, pod_obj, running

pytestmark = pytest.mark.cluster


@pytest.fixture
def agent(testbed: Testbed, tmp_path: Path) -> Iterator[AgentProcess]:
    host = profiles.build("dgx-h100", tmp_path / "host")
    a = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    try:
        yield a
    finally:
        a.stop()


def _restart(agent: AgentProcess) -> None:
    agent.kill()
    agent.start()
    agent.wait_registered(90)


@pytest.mark.parametrize("point", ["prepare-after-cdi", "prepare-after-checkpoint"])
def test_killed_during_prepare(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess, point: str
) -> None:
    agent.start(pause_at=point)
    agent.wait_registered()
    kube_client.create(claim_obj("gpu", namespace, one_gpu()))
    kube_client.create(pod_obj("app", namespace, "gpu"))
    assert agent.wait_paused() == point
    uid = kube_client.get(ResourceClaim, "gpu", namespace=namespace).metadata.uid
    assert agent.spec_uids() == {uid}  # the spec was written before the kill
    _restart(agent)

    eventually(lambda: running(kube_client, "app", namespace), 120, "pod Running after restart")
    assert agent.spec_uids() == {uid}
    assert list(agent.checkpoint_claims()) == [uid]
    assert agent.stray_files() == []
    recs = testbed.kubelet.container_records(namespace=namespace, pod="app")
    device = agent.checkpoint_claims()[uid]["devices"][0]["device"]
    assert {r.cdi_devices for r in recs} == {(f"kubeacc.io/claim={uid}-{device}",)}

    kube_client.delete(Pod, "app", namespace=namespace)
    eventually(lambda: not agent.spec_uids() and not agent.checkpoint_claims(), 90, "unprepared")


def _running_pod_with_a_gpu(kube_client: Client, namespace: str, agent: AgentProcess) -> str:
    """Start the agent and run pod app with claim gpu (one GPU); the claim's UID."""
    agent.start()
    agent.wait_registered()
    kube_client.create(claim_obj("gpu", namespace, one_gpu()))
    kube_client.create(pod_obj("app", namespace, "gpu"))
    eventually(lambda: running(kube_client, "app", namespace), 90, "pod Running")
    return str(kube_client.get(ResourceClaim, "gpu", namespace=namespace).metadata.uid)


@pytest.mark.parametrize(
    "point", ["unprepare-after-sharing", "unprepare-after-checkpoint", "unprepare-after-cdi"]
)
def test_killed_during_unprepare(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess, point: str
) -> None:
    uid = _running_pod_with_a_gpu(kube_client, namespace, agent)
    assert agent.spec_uids() == {uid}

    # same agent state, now armed to stop dead in unprepare
    agent.stop()
    agent.start(pause_at=point)
    agent.wait_registered(90)
    kube_client.delete(Pod, "app", namespace=namespace)
    assert agent.wait_paused() == point
    _restart(agent)

    eventually(lambda: not agent.spec_uids() and not agent.checkpoint_claims(), 120, "unprepared")
    eventually(lambda: gone(kube_client, "app", namespace), 90, "pod gone")
    assert agent.stray_files() == []
    assert "Traceback" not in agent.log()


def test_an_unprepare_lost_to_a_power_cut_is_undone_at_start(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    """An unprepare's journal line is not flushed: a power cut can lose it after the kubelet got
    its answer and forgot the claim. The restarted agent finds the claim recorded, reads it from
    the API server and unprepares it itself (kubeacc.agent.dra.stale)."""
    uid = _running_pod_with_a_gpu(kube_client, namespace, agent)
    agent.kill()
    state = [agent.state_dir / name for name in (FILE_NAME, JOURNAL_NAME)]
    on_disk = {p: p.read_bytes() for p in state if p.exists()}  # the prepare, flushed
    _restart(agent)

    kube_client.delete(Pod, "app", namespace=namespace)
    eventually(lambda: not agent.spec_uids() and not agent.checkpoint_claims(), 90, "unprepared")
    eventually(lambda: gone(kube_client, "app", namespace), 90, "pod gone")
    # the ResourceClaim controller deallocates it once its last consumer went
    eventually(lambda: _deallocated(kube_client, namespace, "gpu"), 60, "claim deallocated")
    agent.kill()  # the power cut: the unprepare's line never reached the disk
    for p in state:
        p.unlink(missing_ok=True)
    for p, data in on_disk.items():
        p.write_bytes(data)
    assert list(agent.checkpoint_claims()) == [uid]
    agent.start()
    agent.wait_registered(90)

    eventually(lambda: not agent.spec_uids() and not agent.checkpoint_claims(), 60, "swept")
    assert f"unprepared claim {namespace}/gpu: " in agent.log()
    assert agent.stray_files() == []
    assert "Traceback" not in agent.log()


def _deallocated(client: Client, namespace: str, name: str) -> bool:
    status = client.get(ResourceClaim, name, namespace=namespace).status
    return status is None or status.allocation is None


def test_a_claim_the_kubelet_never_unprepares_is_unprepared_by_the_agent(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess
) -> None:
    """The kubelet is down while its pod is force-deleted: the claim is deallocated, and no
    kubelet call will come while it stays down. The agent's periodic check
    (kubeacc.agent.dra.stale) unprepares the claim itself once unused for its grace; the
    kubelet, back, unprepares a claim the agent no longer holds without an error."""
    uid = _running_pod_with_a_gpu(kube_client, namespace, agent)
    testbed.kubelet.stop_kubelet()
    try:
        kube_client.delete(Pod, "app", namespace=namespace, grace_period=0)
        eventually(lambda: _deallocated(kube_client, namespace, "gpu"), 60, "claim deallocated")
        assert list(agent.checkpoint_claims()) == [uid]  # nobody unprepared it yet
        eventually(
            lambda: not agent.spec_uids() and not agent.checkpoint_claims(),
            stale.INTERVAL_S + stale.GRACE_S + 60,
            "unprepared by the agent",
        )
        assert "the kubelet did not unprepare it" in agent.log()
    finally:
        testbed.restart_kubelet(timeout=90)
    agent.wait_registered(90)
    assert agent.stray_files() == []
    assert "Traceback" not in agent.log()
