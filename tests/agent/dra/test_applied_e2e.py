"""GPU sharing strategies on the testbed: the real kubelet prepares claims whose GpuConfig asks
for MPS or time-slicing, the agent applies them through the (synthetic) NVML and driver tools,
the MPS control daemon runs while a share uses the GPU, and a strategy the GPU cannot do reaches
the pod's events as the kubelet's prepare error."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod
from lightkube.resources.resource_v1 import DeviceClass, ResourceClaim

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.tools.hoststate import read_calls, read_state
from kubeacc.testbed import Testbed

from ...nodestack import claim_pod, resource_claim
from ...testbed.helpers import eventually
from .agentproc import AgentProcess
from .test_sharing_e2e import cdi_env, running

pytestmark = pytest.mark.cluster

SHARED_BDF = "0000:1b:00.0"
SHARED = "gpu-0000-1b-00-0"


@pytest.fixture
def host(tmp_path: Path) -> Path:
    root = profiles.build("dgx-h100", tmp_path / "host")
    path = root / ".synthetic/nvml.json"
    doc = json.loads(path.read_text())
    for gpu in doc["gpus"]:  # these GPUs cannot change their time slice
        gpu["timeslice"] = False
    path.write_text(json.dumps(doc))
    return root


@pytest.fixture
def agent(testbed: Testbed, tmp_path: Path, host: Path) -> Iterator[AgentProcess]:
    a = AgentProcess(
        testbed.node_name, host, testbed.kubeconfig, testbed.kubelet.root_dir, tmp_path
    )
    a.start(extra=[f"--memory-shared=pci={SHARED_BDF}"])
    try:
        a.wait_registered()
        yield a
    finally:
        a.stop()
        from kubeacc.agent.dra.sharing.mps import MpsDaemons

        daemons = MpsDaemons(SyntheticHost(host), a.state_dir / "mps")
        for bus_id in daemons.running():  # never leave a daemon behind
            daemons.stop(bus_id, "")


def gpu_claim(
    client: Client,
    name: str,
    ns: str,
    sharing: dict[str, str],
    memory: str | None = None,
    own: bool = False,
) -> Any:
    """A claim of a whole GPU, or with ``memory`` a share of the memory-shared one. The
    GpuConfig ``sharing`` of a share comes from a DeviceClass, as the admin sets it (the
    claim's own config with ``own``: refused); a whole GPU's from the claim."""
    exactly: dict[str, Any] = {"deviceClassName": "gpu.kubeacc.io"}
    config = {
        "opaque": {
            "driver": DRIVER_NAME,
            "parameters": {
                "apiVersion": "kubeacc.io/v1alpha1",
                "kind": "GpuConfig",
                "sharing": sharing,
            },
        }
    }
    configs = [config] if sharing else []
    # a whole GPU: not the memory-shared one (a claim there would get a share of it)
    exactly["selectors"] = [{"cel": {"expression": "!device.allowMultipleAllocations"}}]
    if memory:
        exactly["selectors"] = [{"cel": {"expression": "device.allowMultipleAllocations"}}]
        exactly["capacity"] = {"requests": {"kubeacc.io/memory": memory}}
        if sharing and not own:
            exactly["deviceClassName"] = strategy_class(client, sharing, config)
            configs = []
    return resource_claim(name, ns, [{"name": "gpu", "exactly": exactly}], configs)


def strategy_class(client: Client, sharing: dict[str, str], config: dict[str, Any]) -> str:
    """A DeviceClass of GPUs whose opaque config sets ``sharing`` (what a policy generates)."""
    name = f"{sharing['strategy'].lower()}.test.kubeacc.io"
    client.apply(
        DeviceClass.from_dict(
            {
                "metadata": {"name": name},
                "spec": {
                    "selectors": [
                        {"cel": {"expression": 'device.attributes["kubeacc.io"].type == "gpu"'}}
                    ],
                    "config": [config],
                },
            }
        ),
        field_manager="kubeacc-test",
    )
    return name


def gone(client: Client, name: str, ns: str) -> bool:
    return not any(p.metadata and p.metadata.name == name for p in client.list(Pod, namespace=ns))


def mps(host: Path) -> list[tuple[str, str]]:
    return [(c["call"], c["gpu"]) for c in read_calls(host) if c["tool"] == "mps"]


def test_mps_daemon_lives_from_the_first_share_to_the_last(
    testbed: Testbed, kube_client: Client, namespace: str, agent: AgentProcess, host: Path
) -> None:
    for name in ("mps-a", "mps-b"):
        kube_client.create(gpu_claim(kube_client, name, namespace, {"strategy": "MPS"}, "8G"))
        kube_client.create(claim_pod(name, namespace, name))
    for name in ("mps-a", "mps-b"):
        eventually(lambda n=name: running(kube_client, n, namespace), 90, f"{name} Running")
    uuid = next(
        g["uuid"]
        for g in json.loads((host / ".synthetic/nvml.json").read_text())["gpus"]
        if g["busId"].lower().endswith("1b:00.0")
    )
    assert mps(host) == [("start", uuid)]  # one daemon for the GPU, started by the first share
    assert read_state(host)["gpus"][uuid]["computeMode"] == 3
    pipe = agent.state_dir / "mps" / SHARED_BDF / "pipe"
    assert (pipe / "nvidia-cuda-mps-control.pid").is_file()

    for name in ("mps-a", "mps-b"):
        claim = as_dict(kube_client.get(ResourceClaim, name, namespace=namespace))
        assert claim["status"]["allocation"]["devices"]["results"][0]["device"] == SHARED
        (rec,) = testbed.kubelet.container_records(namespace=namespace, pod=name)
        env = cdi_env(agent.cdi_dir, rec)
        assert env["CUDA_MPS_PIPE_DIRECTORY"] == "/tmp/nvidia-mps"
        assert env["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=7630M"
        assert env["KUBEACC_SHARE_ENFORCEMENT"] == "mps" and "LD_PRELOAD" not in env
        uid = claim["metadata"]["uid"]
        spec = json.loads((agent.cdi_dir / f"kubeacc.io-claim_{uid}.json").read_text())
        # the pipe, and the request's device metadata file (KEP-5304)
        edits = spec["devices"][0]["containerEdits"]
        mounts = {m["containerPath"]: m["hostPath"] for m in edits["mounts"]}
        assert mounts["/tmp/nvidia-mps"] == str(pipe)

    kube_client.delete(Pod, "mps-a", namespace=namespace)
    eventually(lambda: gone(kube_client, "mps-a", namespace), 90, "mps-a gone")
    assert mps(host) == [("start", uuid)]  # mps-b still uses the GPU
    kube_client.delete(Pod, "mps-b", namespace=namespace)
    eventually(lambda: len(mps(host)) == 2, 90, "the daemon stopped with the last share")
    assert mps(host) == [("start", uuid), ("stop", uuid)]
    eventually(
        lambda: read_state(host)["gpus"][uuid]["computeMode"] == 0, 30, "compute mode restored"
    )


def test_a_strategy_the_gpu_cannot_do_is_the_pods_event(
    kube_client: Client, namespace: str, agent: AgentProcess, host: Path
) -> None:
    sharing = {"strategy": "TimeSlicing", "timeSlice": "Long"}
    kube_client.create(gpu_claim(kube_client, "slices", namespace, sharing))
    kube_client.create(claim_pod("slices", namespace, "slices"))

    def event() -> str | None:
        for e in kube_client.list(Event, namespace=namespace):
            if e.involvedObject.name == "slices" and "time slice" in (e.message or ""):
                return e.message
        return None

    message = eventually(event, 90, "the prepare error in the pod's events")
    assert "cannot do TimeSlicing (time slice Long)" in message
    assert "Setting the time slice is not supported" in message
    assert not running(kube_client, "slices", namespace)
    assert agent.spec_uids() == set()  # nothing prepared, nothing left on the GPU
    assert [c["result"] for c in read_calls(host) if c["tool"] == "nvidia-smi"][:1] == [
        "NOT_SUPPORTED"
    ]


def test_the_strategy_of_a_shared_gpu_is_the_admins(
    kube_client: Client, namespace: str, agent: AgentProcess, host: Path
) -> None:
    """A tenant's claim cannot set a shared GPU's strategy, nor join an MPS GPU without MPS;
    the share already on it keeps running on MPS (docs/security.md)."""
    kube_client.create(gpu_claim(kube_client, "victim", namespace, {"strategy": "MPS"}, "8G"))
    kube_client.create(claim_pod("victim", namespace, "victim"))
    eventually(lambda: running(kube_client, "victim", namespace), 90, "victim Running")
    tries = {
        "own": gpu_claim(kube_client, "own", namespace, {"strategy": "TimeSlicing"}, "8G", True),
        "plain": gpu_claim(kube_client, "plain", namespace, {}, "8G"),
    }
    for name, rc in tries.items():
        kube_client.create(rc)
        kube_client.create(claim_pod(name, namespace, name))

    def event(pod: str, words: str) -> str | None:
        for e in kube_client.list(Event, namespace=namespace):
            if e.involvedObject.name == pod and words in (e.message or ""):
                return e.message
        return None

    own = eventually(lambda: event("own", "strategy comes from"), 90, "own refused")
    assert "its sharing strategy comes from the DeviceClass" in own, own
    plain = eventually(lambda: event("plain", "runs MPS"), 90, "plain refused")
    assert "this share runs no strategy" in plain, plain
    assert not running(kube_client, "own", namespace)
    assert not running(kube_client, "plain", namespace)
    uuid = next(
        g["uuid"]
        for g in json.loads((host / ".synthetic/nvml.json").read_text())["gpus"]
        if g["busId"].lower().endswith("1b:00.0")
    )
    assert read_state(host)["gpus"][uuid]["computeMode"] == 3  # still MPS, never time-sliced
    assert mps(host) == [("start", uuid)]
    assert running(kube_client, "victim", namespace)


def _restart(agent: AgentProcess, pause_at: str | None = None, kill: bool = True) -> None:
    if kill:
        agent.kill()
    else:
        agent.stop()
    agent.start(pause_at=pause_at, extra=[f"--memory-shared=pci={SHARED_BDF}"])
    agent.wait_registered(90)


def test_agent_killed_around_the_mps_daemon_recovers_it(
    kube_client: Client, namespace: str, agent: AgentProcess, host: Path
) -> None:
    from kubeacc.agent.dra.sharing.mps import MpsDaemons

    daemons = MpsDaemons(SyntheticHost(host), agent.state_dir / "mps")
    uuid = next(
        g["uuid"]
        for g in json.loads((host / ".synthetic/nvml.json").read_text())["gpus"]
        if g["busId"].lower().endswith("1b:00.0")
    )

    # Killed after the daemon started and the CDI spec was written, before the checkpoint.
    _restart(agent, "prepare-after-cdi", kill=False)
    kube_client.create(gpu_claim(kube_client, "crash", namespace, {"strategy": "MPS"}, "8G"))
    kube_client.create(claim_pod("crash", namespace, "crash"))
    assert agent.wait_paused() == "prepare-after-cdi"
    assert mps(host) == [("start", uuid)] and set(daemons.running()) == {SHARED_BDF}
    assert agent.checkpoint_claims() == {}
    _restart(agent)  # the restart undoes it; the kubelet's retry starts it again
    eventually(lambda: running(kube_client, "crash", namespace), 120, "Running after restart")
    assert mps(host) == [("start", uuid), ("stop", uuid), ("start", uuid)]
    assert set(daemons.running()) == {SHARED_BDF}
    (uid,) = agent.checkpoint_claims()

    # A plain restart keeps the daemon of a prepared claim.
    pid = daemons.running()[SHARED_BDF]
    _restart(agent)
    assert daemons.running() == {SHARED_BDF: pid}

    # Killed after the daemon stopped and the compute mode came back, before the checkpoint
    # forgot the claim (the GPU is put back first: docs/sharing.md): the restart does not start
    # the daemon again for the claim, and the kubelet's retry forgets it.
    _restart(agent, "unprepare-after-sharing", kill=False)
    kube_client.delete(Pod, "crash", namespace=namespace)
    assert agent.wait_paused() == "unprepare-after-sharing"
    assert daemons.running() == {}
    assert mps(host)[-1] == ("stop", uuid)
    assert read_state(host)["gpus"][uuid]["computeMode"] == 0
    assert uid in agent.checkpoint_claims()
    _restart(agent)
    eventually(lambda: uid not in agent.checkpoint_claims(), 90, "unprepared after the restart")
    assert daemons.running() == {}
    assert mps(host)[-1] == ("stop", uuid)  # and not started again
    assert "Traceback" not in agent.log()
