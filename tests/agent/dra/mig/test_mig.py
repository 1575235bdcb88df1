"""MIG GPUs as partitionable devices: what NVML offers becomes slice entries and counter sets,
prepare creates the GPU/compute instance, unprepare and reconcile destroy it (the synthetic
NVML's call log shows the calls); the slices pass the API server's validation."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, cast

import pynvml
import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.agent.dra.devices import device_index, slice_devices
from kubeacc.agent.dra.devicestatus import DeviceStatusWriter
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.agent.dra.mig.model import counter_set, partition_name
from kubeacc.agent.dra.mig.nvml import nvml_for
from kubeacc.agent.dra.mig.prepare import MigPartitions
from kubeacc.agent.dra.mig.publish import Published, device_infos, publish
from kubeacc.agent.dra.sharing.policyshare import MigFilter
from kubeacc.agent.dra.slices import build_slices, chunk_devices
from kubeacc.node import atomic, cdi
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.mig_hw import cap_minor
from kubeacc.synthetic.mig_state import read_calls, reboot
from tests.agent.dra.powerloss import PowerLossOS
from tests.hosts import discover

NODE = "n1"
#: The driver's control and UVM nodes (every NVIDIA GPU's, a partition's too).
CONTROL_NODES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools")
H100, A100 = "gpu-0000-01-00-0", "gpu-0000-02-00-0"


class Host:
    def __init__(self, tmp: Path, profile: str = "mig-pair") -> None:
        self.root = profiles.build(profile, tmp / profile)
        self.state = tmp / "state"
        self.state.mkdir(exist_ok=True)
        self.inv = discover(self.root)
        self.parts = MigPartitions(
            nvml_for(SyntheticHost(self.root), "auto"), self.state, SyntheticHost(self.root)
        )

    def published(self) -> Published:
        gpus, uuids = self.parts.read(self.inv)
        return publish(self.inv, slice_devices(self.inv), gpus, self.parts.ours(), uuids)

    def calls(self) -> list[tuple[str, Any]]:
        return [(c["call"], c.get("gpuInstanceId")) for c in read_calls(self.root / ".synthetic")]


class StatusSeen(DeviceStatusWriter):
    """The status writer's queue as the driver fills it (nothing sent: no claim on a server)."""

    def __init__(self) -> None:
        super().__init__(cast(Client, None), NODE)
        self.written: list[tuple[tuple[str, str, str], list[dict[str, Any]]]] = []

    def start(self) -> None:
        pass

    def prepared(self, namespace: str, name: str, uid: str, entries: list[dict[str, Any]]) -> None:
        self.written.append(((namespace, name, uid), entries))


@pytest.fixture
def host(tmp_path: Path) -> Host:
    return Host(tmp_path)


def test_every_placement_is_a_device_consuming_the_gpus_counters(host: Host) -> None:
    pub = host.published()
    entries = {e["name"]: e for e in pub.apply(slice_devices(host.inv))}
    for gpu in (H100, A100):
        parts = [n for n in entries if n.startswith(f"{gpu}-mig-")]
        assert len(parts) == 7 + 4 + 3 + 2 + 1 + 1
        whole = entries[gpu]
        (use,) = whole["consumesCounters"]
        assert use["counterSet"] == counter_set(gpu)
        assert len(use["counters"]) == 9 and use["counters"]["compute-slices"] == {"value": "7"}
    three = entries[partition_name(H100, "3g.40gb", 4)]
    assert three["attributes"]["migProfile"] == {"string": "3g.40gb"}
    assert three["attributes"]["parentPciBusID"] == {"string": "0000:01:00.0"}
    assert three["capacity"]["kubeacc.io/memory"]["value"] == str(40448 << 20)
    assert set(three["consumesCounters"][0]["counters"]) == {
        "memory-slice-4", "memory-slice-5", "memory-slice-6", "memory-slice-7", "compute-slices"
    }  # fmt: skip
    assert [c["name"] for c in pub.counter_sets] == [counter_set(H100), counter_set(A100)]
    index = device_infos(host.inv, pub)
    assert index[partition_name(A100, "1g.10gb", 6)].mig is not None
    # the partitions and whole GPUs (38) consume counters: at most 64 per slice
    assert all(len(c) <= 64 for c in chunk_devices(list(entries.values())))


def test_fixed_instances_are_published_as_they_are(tmp_path: Path) -> None:
    dgx = Host(tmp_path, "dgx-h100")
    gpu7 = "gpu-0000-bf-00-0"
    entries = {e["name"]: e for e in dgx.published().apply(slice_devices(dgx.inv))}
    mine = sorted(n for n in entries if n.startswith(gpu7))
    # every memory slice is taken by the three boot-time instances: no whole GPU, no placement
    assert mine == [f"{gpu7}-mig-gi2", f"{gpu7}-mig-gi3", f"{gpu7}-mig-gi5"]
    assert entries[f"{gpu7}-mig-gi2"]["attributes"]["migProfile"] == {"string": "3g.40gb"}
    assert "consumesCounters" not in entries[f"{gpu7}-mig-gi2"]
    assert "gpu-0000-1b-00-0" in entries  # the other GPUs stay plain


def test_slices_with_counter_sets_pass_the_api_server(
    host: Host, kube_client: Client, api_node: str
) -> None:
    pub = host.published()
    devices = pub.apply(slice_devices(host.inv))
    objs = build_slices(api_node, None, devices, 1, counter_sets=pub.counter_sets)
    assert [("sharedCounters" in o["spec"], "devices" in o["spec"]) for o in objs] == [
        (False, True),
        (True, False),
    ]
    try:
        for o in objs:
            kube_client.create(cast(ResourceSlice, ResourceSlice.from_dict(o)))
        got = kube_client.get(ResourceSlice, objs[1]["metadata"]["name"])
        assert got.spec.sharedCounters is not None and len(got.spec.sharedCounters) == 2
    finally:
        for o in objs:
            kube_client.delete(ResourceSlice, o["metadata"]["name"])


# -- prepare / unprepare ----------------------------------------------------------------------


class Claims:
    def __init__(self) -> None:
        self.objs: dict[str, dict[str, Any]] = {}

    def add(self, name: str, uid: str, devices: list[str]) -> None:
        results = [
            {"request": "gpu", "driver": "kubeacc.io", "pool": NODE, "device": d} for d in devices
        ]
        self.objs[name] = {
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "status": {"allocation": {"devices": {"results": results}}},
        }

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self.objs.get(name)


def make_driver(host: Host, claims: Claims) -> Driver:
    index = {**device_index(host.inv), **device_infos(host.inv, host.published())}
    return Driver(
        NODE,
        claims,
        lambda: index,
        cdi_dir=host.state.parent / "cdi",
        state_dir=host.state,
        device_root=host.root,
        partitions=host.parts,
    )


def spec_edits(host: Host, uid: str) -> dict[str, Any]:
    spec = json.loads(cdi.spec_path(host.state.parent / "cdi", uid).read_text())
    (dev,) = spec["devices"]
    edits: dict[str, Any] = dev["containerEdits"]
    return edits


def test_prepare_creates_the_instance_and_unprepare_destroys_it(host: Host) -> None:
    claims = Claims()
    driver = make_driver(host, claims)
    dev = partition_name(H100, "3g.40gb", 4)
    claims.add("a", "u1", [dev])
    (res,) = driver.prepare([ClaimRef("ns", "a", "u1")]).values()
    assert not res.error, res.error
    edits = spec_edits(host, "u1")
    env = dict(kv.split("=", 1) for kv in edits["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
    assert env["KUBEACC_MIG_PROFILE"] == "3g.40gb"
    paths = [n["path"] for n in edits["deviceNodes"]]
    assert paths == [
        "/dev/nvidia0",
        "/dev/nvidia-caps/nvidia-cap12",
        "/dev/nvidia-caps/nvidia-cap13",
        *CONTROL_NODES,  # the driver's control and UVM nodes come with a partition too
    ]
    assert host.calls() == [
        ("nvmlDeviceCreateGpuInstanceWithPlacement", 1),
        ("nvmlGpuInstanceCreateComputeInstance", 1),
    ]
    # the instance is ours: the slice does not change
    assert host.published().apply(slice_devices(host.inv)) == Host.published(host).apply(
        slice_devices(host.inv)
    )
    assert partition_name(H100, "3g.40gb", 4) in host.published().index
    # a repeated prepare answers from the checkpoint, creates nothing
    driver.prepare([ClaimRef("ns", "a", "u1")])
    assert len(host.calls()) == 2
    # destroying instances is a worker thread's: never on the gRPC loop, nor waited for there
    assert driver.unprepare_nowait([ClaimRef("ns", "a", "u1")]) is None
    with host.parts.lock:  # another call at work on the records: no waiting for it either
        assert host.parts.may_hold({"u-other"})
    assert not host.parts.may_hold({"u-other"})
    assert driver.unprepare([ClaimRef("ns", "a", "u1")]) == {"u1": ""}
    assert host.calls()[2:] == [("nvmlComputeInstanceDestroy", 1), ("nvmlGpuInstanceDestroy", 1)]
    assert host.parts.records == [] and read_claims(host.state) == {}


def test_no_power_loss_leaves_the_mig_records_empty(
    host: Host, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue 46: the records were rewritten with the instance ids without an fsync, and the
    rename could reach the disk before the bytes (a directory fsync, or the file system's own
    journal commit): after a power loss ``mig.json`` could be empty and the agent refused to
    start. Every rename of the records or the checkpoint is now of a flushed file (CDI specs and
    metadata files are derived and made again at start: docs/dra.md)."""
    fs = PowerLossOS(os)
    monkeypatch.setattr(atomic, "os", fs)
    claims = Claims()
    driver = make_driver(host, claims)
    for i, start in enumerate((0, 4)):
        claims.add(f"c{i}", f"u{i}", [partition_name(H100, "3g.40gb", start)])
        (res,) = driver.prepare([ClaimRef("ns", f"c{i}", f"u{i}")]).values()
        assert not res.error, res.error
    driver.unprepare([ClaimRef("ns", "c0", "u0")])
    assert fs.torn, "the model sees the derived files' renames"
    assert not fs.torn_names() & {"mig.json", "dra-checkpoint.json"}, fs.torn


def test_a_failing_claim_leaves_no_instance(host: Host) -> None:
    claims = Claims()
    driver = make_driver(host, claims)
    claims.add("a", "u1", [partition_name(A100, "7g.80gb", 0), "gpu-unknown"])
    (res,) = driver.prepare([ClaimRef("ns", "a", "u1")]).values()
    assert "not published" in res.error
    assert [c for c, _ in host.calls()] == [
        "nvmlDeviceCreateGpuInstanceWithPlacement",
        "nvmlGpuInstanceCreateComputeInstance",
        "nvmlComputeInstanceDestroy",
        "nvmlGpuInstanceDestroy",
    ]
    # an instance someone else made where the claim's placement is: a clear error, no change
    lib = host.parts.nvml()

    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, 0, pynvml.c_nvmlGpuInstancePlacement_t(0, 8))
    claims.add("b", "u2", [partition_name(H100, "1g.10gb", 3)])
    (res,) = driver.prepare([ClaimRef("ns", "b", "u2")]).values()
    assert "creating MIG 1g.10gb at memory slice 3" in res.error
    assert host.parts.records == []


def test_a_reboot_makes_the_prepared_claims_instances_again(host: Host) -> None:
    """Issue 46: a node reboot destroys every MIG instance (MIG mode stays) while the checkpoint
    in /var/lib keeps the claim prepared; the kubelet then prepares it again for the pod it
    restarts. The agent's start makes the instance again at the claim's placement and its spec,
    checkpoint and metadata name the new instance (new MIG UUID, new capability nodes); a claim
    no longer prepared gets nothing back."""
    claims = Claims()
    driver = make_driver(host, claims)
    driver.device_metadata = True
    kept = partition_name(H100, "3g.40gb", 4)
    claims.add("a", "u1", [kept])
    assert not driver.prepare([ClaimRef("ns", "a", "u1")])["u1"].error
    old_env = dict(kv.split("=", 1) for kv in spec_edits(host, "u1")["env"])
    old_uuid = old_env["NVIDIA_VISIBLE_DEVICES"]
    # another instance is made and destroyed first, so the new ids cannot be the old ones
    driver.checkpoint.close()
    reboot(host.root)
    assert host.parts.nvml() is not None
    lib = host.parts.nvml()
    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, 19, pynvml.c_nvmlGpuInstancePlacement_t(0, 1))
    again = Host.__new__(Host)
    again.__dict__.update(host.__dict__)
    again.parts = MigPartitions(
        nvml_for(SyntheticHost(host.root), "auto"), host.state, SyntheticHost(host.root)
    )
    restarted = make_driver(again, claims)
    restarted.device_metadata = True
    restarted.reconcile()
    (rec,) = again.parts.records
    assert (rec.claim, rec.start) == ("u1", 4) and rec.uuid and rec.uuid != old_uuid
    edits = spec_edits(host, "u1")
    env = dict(kv.split("=", 1) for kv in edits["env"])
    assert env["NVIDIA_VISIBLE_DEVICES"] == rec.uuid
    caps = [n["path"] for n in edits["deviceNodes"] if "nvidia-caps" in n["path"]]
    assert caps == [
        f"/dev/nvidia-caps/nvidia-cap{cap_minor(0, rec.gi)}",
        f"/dev/nvidia-caps/nvidia-cap{cap_minor(0, rec.gi, rec.ci)}",
    ]
    assert edits["deviceNodes"][0]["path"] == "/dev/nvidia0"
    # the durable record says the same: a second restart changes nothing
    assert read_claims(host.state)["u1"]["cdi_spec"] == json.loads(
        cdi.spec_path(host.state.parent / "cdi", "u1").read_text()
    )
    meta = (host.state / "dra-device-metadata" / "u1").rglob("metadata.json")
    assert any(rec.uuid in p.read_text() for p in meta)
    # the claim's status.devices names the new instance once the writer starts, before any
    # repeated prepare (a GPU reset without a kubelet restart gets none)
    status = StatusSeen()
    restarted.start_status(status)
    ((where, entries),) = status.written
    assert where == ("ns", "a", "u1")
    assert [(e["device"], e["data"]["uuid"]) for e in entries] == [(kept, rec.uuid)]
    # the kubelet's repeated prepare answers from the checkpoint with the new instance
    (res,) = restarted.prepare([ClaimRef("ns", "a", "u1")]).values()
    assert not res.error
    # and unprepare destroys the new instance
    assert restarted.unprepare([ClaimRef("ns", "a", "u1")]) == {"u1": ""}
    assert again.parts.records == []


@pytest.mark.parametrize("learnt_id", [True, False])
def test_restart_destroys_instances_of_claims_not_checkpointed(host: Host, learnt_id: bool) -> None:
    claims = Claims()
    driver = make_driver(host, claims)
    kept, lost = partition_name(H100, "2g.20gb", 0), partition_name(H100, "1g.20gb", 6)
    claims.add("a", "u1", [kept])
    assert not driver.prepare([ClaimRef("ns", "a", "u1")])["u1"].error
    # the agent dies after creating u2's instance, before its checkpoint entry
    part = device_infos(host.inv, host.published())[lost].mig
    assert part is not None
    host.parts.create("u2", lost, part)
    if not learnt_id:  # ... or even before it recorded the instance's id
        host.parts.records[-1].gi = None
        host.parts.records[-1].ci = None
        host.parts._save()
    driver.checkpoint.close()
    again = Host.__new__(Host)
    again.__dict__.update(host.__dict__)
    again.parts = MigPartitions(
        nvml_for(SyntheticHost(host.root), "auto"), host.state, SyntheticHost(host.root)
    )
    restarted = make_driver(again, claims)
    restarted.reconcile()
    assert [r.claim for r in again.parts.records] == ["u1"]
    tail = [c for c, _ in again.calls()][-2:]
    assert tail == ["nvmlComputeInstanceDestroy", "nvmlGpuInstanceDestroy"]
    lib = again.parts.nvml()
    assert lib.nvmlDeviceGetMaxMigDeviceCount(lib.nvmlDeviceGetHandleByIndex(0)) == 7
    assert len(lib.mig_view(0)[1]) == 1  # u1's instance stays
    # the kubelet's retry of u2 now creates it again, and it is checkpointed
    claims.add("b", "u2", [lost])
    assert not restarted.prepare([ClaimRef("ns", "b", "u2")])["u2"].error
    assert set(read_claims(host.state)) == {"u1", "u2"}
    assert len(lib.mig_view(0)[1]) == 2


def test_a_fixed_instance_is_handed_out_as_it_is(tmp_path: Path) -> None:
    dgx = Host(tmp_path, "dgx-h100")
    gpu7 = "gpu-0000-bf-00-0"
    claims = Claims()
    driver = make_driver(dgx, claims)
    claims.add("a", "u1", [f"{gpu7}-mig-gi3"])
    (res,) = driver.prepare([ClaimRef("ns", "a", "u1")]).values()
    assert not res.error, res.error
    edits = spec_edits(dgx, "u1")
    env = dict(kv.split("=", 1) for kv in edits["env"])
    lib = dgx.parts.nvml()
    (mig,) = [m for m in lib.mig_view(7)[1] if m["gpuInstanceId"] == 3]
    assert env["NVIDIA_VISIBLE_DEVICES"] == mig["uuid"]
    paths = [n["path"] for n in edits["deviceNodes"]]
    assert paths == [
        "/dev/nvidia7",
        "/dev/nvidia-caps/nvidia-cap975",
        "/dev/nvidia-caps/nvidia-cap976",
        *CONTROL_NODES,  # the driver's control and UVM nodes come with a partition too
    ]
    assert driver.unprepare([ClaimRef("ns", "a", "u1")]) == {"u1": ""}
    assert dgx.calls() == [] and len(lib.mig_view(7)[1]) == 3  # never created or destroyed
    assert dgx.published().whole[gpu7] is None  # not whole: not published, not prepared


def test_damaged_records_stop_the_agent_with_one_line(host: Host) -> None:
    from kubeacc.agent.dra.checkpoint import StateError

    (host.state / "mig.json").write_text('{"records": [{"claim": 1}]}')
    with pytest.raises(StateError, match=r"MIG instance records .* unreadable"):
        MigPartitions(
            nvml_for(SyntheticHost(host.root), "auto"), host.state, SyntheticHost(host.root)
        )


def test_policy_filters_keep_only_the_listed_profiles(host: Host) -> None:
    pub = host.published()
    filters = {
        H100: MigFilter(frozenset({"3g.40gb"}), True),
        A100: MigFilter(frozenset({"7g.80gb", "1g.20gb"}), False),
    }
    names = {e["name"] for e in pub.apply(slice_devices(host.inv), filters)}
    assert {n for n in names if n.startswith(H100)} == {
        H100, partition_name(H100, "3g.40gb", 0), partition_name(H100, "3g.40gb", 4)
    }  # fmt: skip
    a100 = {n for n in names if n.startswith(A100)}
    assert A100 not in a100  # migWholeGpu false
    assert a100 == {partition_name(A100, "7g.80gb", 0)} | {
        partition_name(A100, "1g.20gb", s) for s in (0, 2, 4, 6)
    }
    assert len(pub.counter_sets) == 2  # counters stay: the published devices consume them
    # without filters, everything (as before)
    assert len(pub.apply(slice_devices(host.inv))) == len(pub.apply(slice_devices(host.inv), {}))


def test_policy_filters_never_hide_fixed_instances(tmp_path: Path) -> None:
    dgx = Host(tmp_path, "dgx-h100")
    gpu7 = "gpu-0000-bf-00-0"
    filters = {gpu7: MigFilter(frozenset({"1g.10gb"}), True)}
    entries = {e["name"] for e in dgx.published().apply(slice_devices(dgx.inv), filters)}
    assert sorted(n for n in entries if n.startswith(gpu7)) == [
        f"{gpu7}-mig-gi2", f"{gpu7}-mig-gi3", f"{gpu7}-mig-gi5"
    ]  # fmt: skip
