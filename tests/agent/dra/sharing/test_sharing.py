"""Memory-shared GPUs: selectors, the published capacities and policies, a share's limits and
its environment, and prepare/unprepare of shares (in memory; the testbed run is in
test_sharing_e2e.py)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.agent.dra.devices import device_index, slice_devices
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.agent.dra.plugin import DRAPlugin
from kubeacc.agent.dra.sharing.limits import (
    CORES,
    MEMORY,
    SelectorError,
    ShareLimits,
    ShareSelector,
    UnitLimits,
    is_memory_shared,
    limit_env,
    parse_selectors,
    shared_capacity,
    unknown_memory,
)
from kubeacc.engine.quantity import parse_quantity
from kubeacc.model import Inventory
from kubeacc.node import cdi
from kubeacc.node.kubeletapi import dra_v1_pb2 as v1

NODE = "n1"
GPU0, GPU1 = "gpu-0000-1b-00-0", "gpu-0000-1d-00-0"
MIG_GPU = "gpu-0000-bf-00-0"  # dgx-h100's GPU 7 is in MIG mode
H100 = 85520809984  # bytes, 81559 MiB


# -- selectors --------------------------------------------------------------------------------
def test_selectors_pick_gpus_by_model_pci_and_name(dgx: Inventory) -> None:
    devs = {d.name: d for d in dgx.devices}

    def chosen(*texts: str) -> set[str]:
        sel = parse_selectors(texts)
        return {n for n, d in devs.items() if is_memory_shared(d, sel)}

    every_gpu = {n for n, d in devs.items() if d.type.value == "gpu"}
    assert chosen("all") == every_gpu - {MIG_GPU}
    assert chosen("model=*h100*") == every_gpu - {MIG_GPU}
    assert chosen("model=*A100*") == set()
    assert chosen("pci=0000:1B:00.0") == {GPU0}
    assert chosen(f"name={GPU1}", "pci=0000:1b:00.0") == {GPU0, GPU1}
    assert chosen(f"name={MIG_GPU}") == set()  # MIG mode: its instances are the partitions
    assert chosen("name=nic-0000-1c-00-0") == set()  # only GPUs
    assert chosen() == set()
    assert str(ShareSelector.parse(" model = H100* ")) == "model=H100*"


def test_a_selector_over_gpus_of_unknown_memory_says_so(dgx: Inventory) -> None:
    # NVML not found: discovery knows no memory for five of the GPUs
    unknown = sorted(d.name for d in dgx.devices if d.type.value == "gpu")[:5]
    devices = [d.replace(memory_bytes=None) if d.name in unknown else d for d in dgx.devices]
    assert not any(
        is_memory_shared(d, parse_selectors(["all"])) for d in devices if d.name in unknown
    )
    (message,) = unknown_memory(devices, parse_selectors(["model=*h100*", "model=*A100*"]))
    assert message.startswith("memory-shared selector model=*h100* selects 5 devices whose memory")
    assert ", ".join(unknown[:4]) + " and more" in message and "NVML not found" in message
    assert unknown_memory(dgx.devices, parse_selectors(["all"])) == []  # memory known: silent
    # a device that could never be shared (a NIC) is not reported, memory or not
    assert unknown_memory(devices, parse_selectors(["type=nic"])) == []


@pytest.mark.parametrize(
    "text", ["", "some", "model=", "vendor=nvidia", "=x", "pci", "type=", "type=tpu"]
)
def test_bad_selectors_are_refused(text: str) -> None:
    with pytest.raises(SelectorError, match="expected all, type=TYPE, model=GLOB"):
        ShareSelector.parse(text)


def test_xpus_and_amd_gpus_are_shareable_fpgas_only_when_named(make_inventory: Any) -> None:
    def chosen(profile: str, *texts: str) -> set[str]:
        sel = parse_selectors(texts)
        return {d.name for d in make_inventory(profile).devices if is_memory_shared(d, sel)}

    xpus = {d.name for d in make_inventory("kunlun-xpu").devices if d.type.value == "xpu"}
    assert len(xpus) == 8 and chosen("kunlun-xpu", "all") == xpus  # 16 GiB R200s
    assert chosen("kunlun-xpu", "type=xpu") == xpus
    amd = chosen("amd-gpu", "all")
    assert len(amd) == 4  # the MI210s; the Flex 170 reports no memory
    fpgas = {d.name for d in make_inventory("large-mixed").devices if d.type.value == "fpga"}
    assert chosen("large-mixed", "all") & fpgas == set()
    with_memory = {
        d.name for d in make_inventory("large-mixed").devices if d.name in fpgas and d.memory_bytes
    }
    assert chosen("large-mixed", "type=fpga") == with_memory


# -- what the slice says ----------------------------------------------------------------------
def test_shared_gpu_is_published_with_consumable_capacity(dgx: Inventory) -> None:
    devs = {d["name"]: d for d in slice_devices(dgx, parse_selectors(["pci=0000:1b:00.0"]))}
    gpu = devs[GPU0]
    assert gpu["allowMultipleAllocations"] is True
    assert gpu["capacity"] == {
        MEMORY: {
            "value": str(H100),
            "requestPolicy": {
                "default": "81559Mi",
                "validRange": {"min": "256Mi", "max": "81559Mi", "step": "1Mi"},
            },
        },
        CORES: {
            "value": "100",
            "requestPolicy": {
                "default": "0",
                "validRange": {"min": "0", "max": "100", "step": "1"},
            },
        },
    }
    whole = devs[GPU1]
    assert "allowMultipleAllocations" not in whole
    assert whole["capacity"] == {MEMORY: {"value": str(H100)}}
    assert "allowMultipleAllocations" not in devs[MIG_GPU]
    # a shared GPU says what enforces its shares here (no library given: nothing)
    assert gpu["attributes"].keys() - whole["attributes"].keys() == {"shareEnforcement"}
    assert gpu["attributes"]["shareEnforcement"] == {"string": "advisory"}


@pytest.mark.parametrize(
    "memory", [H100, 24152899584, 17179869184, (1 << 28) + (1 << 20), (1 << 34) + 12345]
)
def test_request_policies_pass_the_api_rules(memory: int) -> None:
    """What resource.k8s.io validation demands of a validRange (default and max reachable
    from min in whole steps, within the capacity): checked here for odd sizes too."""
    for cap in shared_capacity(memory).values():
        value = parse_quantity(str(cap["value"]))
        policy: dict[str, Any] = cap["requestPolicy"]  # type: ignore[assignment]
        rng = policy["validRange"]
        lo, hi, step = (parse_quantity(rng[k]) for k in ("min", "max", "step"))
        default = parse_quantity(policy["default"])
        assert 0 <= lo <= default <= hi <= value
        assert lo + step <= value
        assert (default - lo) % step == 0 and (hi - lo) % step == 0
        assert value - hi < step  # nothing usable is left out


# -- a share's limits and environment ---------------------------------------------------------
def test_limits_come_from_the_consumed_capacity() -> None:
    limits = ShareLimits.from_consumed({MEMORY: "19074Mi", CORES: "20"}, H100)
    assert limits == ShareLimits(memory_mib=19074, cores=20)
    # not named: all the memory; no cores reserved: not limited
    assert ShareLimits.from_consumed({}, H100) == ShareLimits(81559, 100)
    assert ShareLimits.from_consumed({MEMORY: "20G", CORES: "0"}, H100) == ShareLimits(19073, 100)
    for bad in ({MEMORY: "lots"}, {MEMORY: "0"}, {CORES: "101"}, {CORES: "-1"}):
        with pytest.raises(ValueError, match="consumedCapacity"):
            ShareLimits.from_consumed(bad, H100)


def test_limit_env_lists_every_unit_in_order() -> None:
    share = ShareLimits(memory_mib=4096, cores=30)
    units = [
        UnitLimits("NVIDIA", share, H100),
        UnitLimits("Mellanox", None, 0),  # a NIC in the same claim
        UnitLimits("NVIDIA", None, H100),  # a whole GPU
        UnitLimits("NVIDIA", ShareLimits(2048, 50), H100),
    ]
    assert limit_env(units) == {
        "KUBEACC_DEVICE_MEMORY_LIMIT": "4096,0,81559,2048",
        "KUBEACC_DEVICE_CORES_LIMIT": "30,100,100,50",
        "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT": "0=4096M,1=81559M,2=2048M",
        "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE": "30",
    }
    amd = limit_env([UnitLimits("AMD", share, 1 << 36)])
    assert amd == {"KUBEACC_DEVICE_MEMORY_LIMIT": "4096", "KUBEACC_DEVICE_CORES_LIMIT": "30"}
    assert limit_env([UnitLimits("NVIDIA", None, H100)]) == {}


# -- prepare and unprepare of shares ----------------------------------------------------------
class Claims:
    """Allocated ResourceClaims as the API server returns them (results with shareIDs)."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, name: str, uid: str, results: list[dict[str, Any]]) -> None:
        full = [{"request": "gpu", "driver": "kubeacc.io", "pool": NODE, **r} for r in results]
        self.objs[("ns", name)] = {
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "status": {"allocation": {"devices": {"results": full}}},
        }

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self.objs.get((namespace, name))


def share(device: str, share_id: str, memory: str, cores: str = "0") -> dict[str, Any]:
    return {
        "device": device,
        "shareID": share_id,
        "consumedCapacity": {MEMORY: memory, CORES: cores},
    }


@pytest.fixture
def claims() -> Claims:
    return Claims()


def make_driver(tmp_path: Path, claims: Claims, dgx: Inventory, **options: Any) -> Driver:
    index = device_index(dgx)
    return Driver(
        NODE,
        claims,
        lambda: index,
        cdi_dir=tmp_path / "cdi",
        state_dir=tmp_path / "state",
        **options,
    )


def spec_env(tmp_path: Path, uid: str, cdi_name: str) -> dict[str, str]:
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", uid).read_text())
    (dev,) = [d for d in spec["devices"] if d["name"] == cdi_name]
    env = [*spec["containerEdits"]["env"], *dev["containerEdits"]["env"]]
    return dict(kv.split("=", 1) for kv in env)


def test_each_share_is_prepared_alone_and_unprepared_alone(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    driver = make_driver(tmp_path, claims, dgx)
    claims.add("a", "u1", [share(GPU0, "s-a", "20480Mi", "25")])
    claims.add("b", "u2", [share(GPU0, "s-b", "8Gi")])
    out = driver.prepare([ClaimRef("ns", "a", "u1"), ClaimRef("ns", "b", "u2")])
    assert [d.cdi_device_ids for d in out["u1"].devices] == [[f"kubeacc.io/claim=u1-{GPU0}-s-a"]]
    assert [d.share_id for d in out["u2"].devices] == ["s-b"]

    a = spec_env(tmp_path, "u1", f"u1-{GPU0}-s-a")
    assert a["ACCELERATOR_UNITS"] == "0000:1b:00.0"
    assert a["KUBEACC_DEVICE_MEMORY_LIMIT"] == "20480"
    assert a["KUBEACC_DEVICE_CORES_LIMIT"] == "25"
    assert a["CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"] == "0=20480M"
    assert a["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "25"
    b = spec_env(tmp_path, "u2", f"u2-{GPU0}-s-b")
    assert (b["KUBEACC_DEVICE_MEMORY_LIMIT"], b["KUBEACC_DEVICE_CORES_LIMIT"]) == ("8192", "100")

    ckpt = read_claims(tmp_path / "state")
    assert {u: [d["share_id"] for d in c["devices"]] for u, c in ckpt.items()} == {
        "u1": ["s-a"],
        "u2": ["s-b"],
    }

    spec_b = cdi.spec_path(tmp_path / "cdi", "u2").read_bytes()
    assert driver.unprepare([ClaimRef("ns", "a", "u1")]) == {"u1": ""}
    assert set(read_claims(tmp_path / "state")) == {"u2"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u2"}
    assert cdi.spec_path(tmp_path / "cdi", "u2").read_bytes() == spec_b

    # a restart: the share comes back from the checkpoint, its lost spec is rewritten
    driver.checkpoint.close()
    cdi.spec_path(tmp_path / "cdi", "u2").unlink()
    again = make_driver(tmp_path, claims, dgx)
    assert again.reconcile() == ([], ["u2"])
    assert cdi.spec_path(tmp_path / "cdi", "u2").read_bytes() == spec_b
    assert [d.share_id for d in again.prepared()["u2"].devices] == ["s-b"]
    (res,) = again.prepare([ClaimRef("ns", "b", "u2")]).values()
    assert res.devices == out["u2"].devices


def test_two_shares_of_one_gpu_in_one_claim_and_a_whole_gpu(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    driver = make_driver(tmp_path, claims, dgx)
    claims.add(
        "c",
        "u1",
        [share(GPU0, "s1", "1Gi", "10"), share(GPU0, "s2", "3Gi", "40"), {"device": GPU1}],
    )
    (res,) = driver.prepare([ClaimRef("ns", "c", "u1")]).values()
    assert res.error == ""
    assert [d.cdi_device_ids[0].split("=")[1] for d in res.devices] == [
        f"u1-{GPU0}-s1",
        f"u1-{GPU0}-s2",
        f"u1-{GPU1}",
    ]
    env = spec_env(tmp_path, "u1", f"u1-{GPU0}-s2")
    assert env["ACCELERATOR_UNITS"] == "0000:1b:00.0,0000:1b:00.0,0000:1d:00.0"
    assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == "1024,3072,81559"
    assert env["CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"] == "10"
    whole = spec_env(tmp_path, "u1", f"u1-{GPU1}")
    assert "KUBEACC_DEVICE_MEMORY_LIMIT" not in whole  # a whole GPU's own device: no limits


def test_a_malformed_share_fails_its_claim_only(
    tmp_path: Path, claims: Claims, dgx: Inventory
) -> None:
    driver = make_driver(tmp_path, claims, dgx)
    claims.add("bad", "u1", [share(GPU0, "s1", "much")])
    claims.add("good", "u2", [share(GPU0, "s2", "1Gi")])
    claims.add("odd", "u3", [share(GPU0, "../x", "1Gi")])
    out = driver.prepare(
        [ClaimRef("ns", "bad", "u1"), ClaimRef("ns", "good", "u2"), ClaimRef("ns", "odd", "u3")]
    )
    assert f"device {GPU0}: consumedCapacity" in out["u1"].error
    assert out["u2"].error == ""
    assert out["u3"].error.endswith("shareID '../x' is not a Kubernetes UID")
    assert set(driver.prepared()) == {"u2"}
    assert cdi.spec_uids(tmp_path / "cdi") == {"u2"}


def test_the_kubelet_gets_the_share_id(tmp_path: Path, claims: Claims, dgx: Inventory) -> None:
    plugin = DRAPlugin(make_driver(tmp_path, claims, dgx))
    claims.add("a", "u1", [share(GPU0, "s-a", "1Gi")])
    claims.add("w", "u2", [{"device": GPU1}])
    resp = plugin.prepare(
        v1.NodePrepareResourcesRequest(
            claims=[
                v1.Claim(namespace="ns", name="a", uid="u1"),
                v1.Claim(namespace="ns", name="w", uid="u2"),
            ]
        )
    )
    (shared,) = resp.claims["u1"].devices
    assert shared.HasField("share_id") and shared.share_id == "s-a"
    (whole,) = resp.claims["u2"].devices
    assert not whole.HasField("share_id")


def test_limits_round_down_to_whole_mib() -> None:
    assert ShareLimits.from_consumed({MEMORY: str(3 * 2**20 - 1)}, H100).memory_mib == 2


def test_a_kunlun_share_gets_the_generic_limits_only(
    tmp_path: Path, claims: Claims, make_inventory: Any
) -> None:
    inv = make_inventory("kunlun-xpu")
    xpu = next(d for d in inv.devices if d.type.value == "xpu")
    index = device_index(inv)
    driver = Driver(
        NODE, claims, lambda: index, cdi_dir=tmp_path / "cdi", state_dir=tmp_path / "state"
    )
    entry = {d["name"]: d for d in slice_devices(inv, parse_selectors(["type=xpu"]))}[xpu.name]
    assert entry["capacity"][MEMORY]["requestPolicy"]["default"] == "16384Mi"
    claims.add("x", "u1", [share(xpu.name, "s-x", "4Gi", "50")])
    (res,) = driver.prepare([ClaimRef("ns", "x", "u1")]).values()
    assert res.error == ""
    env = spec_env(tmp_path, "u1", f"u1-{xpu.name}-s-x")
    assert (env["KUBEACC_DEVICE_MEMORY_LIMIT"], env["KUBEACC_DEVICE_CORES_LIMIT"]) == ("4096", "50")
    assert not [k for k in env if k.startswith("CUDA_MPS")]
