"""The fault runner's hardware invariants fail on planted hardware states: a leaked MIG instance,
record, metadata directory or GPU setting; a Running pod's MIG instance gone, its FPGA empty,
its share's limits not those allocated. Each read from a real synthetic host where it can be."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubeacc.synthetic import mig_state
from kubeacc.synthetic.tools import hoststate
from tests.faults import hardware, nodes
from tests.faults.invariants import ClusterView, NodeView, Tracker, check

NODE = "node-a"


def _claim(uid: str, device: str, **result: Any) -> dict[str, Any]:
    """An allocated claim whose status.devices has this node's entry (the agent wrote it)."""
    r = {"request": "acc", "driver": "kubeacc.io", "pool": NODE, "device": device, **result}
    entry = {"driver": "kubeacc.io", "pool": NODE, "device": device}
    return {
        "metadata": {"name": uid, "uid": uid, "namespace": "ns"},
        "status": {"allocation": {"devices": {"results": [r]}}, "devices": [entry]},
    }


def _pod(claim: str) -> dict[str, Any]:
    return {
        "metadata": {"name": f"p-{claim}", "uid": f"pod-{claim}", "namespace": "ns"},
        "spec": {"nodeName": NODE, "resourceClaims": [{"name": "acc", "resourceClaimName": claim}]},
        "status": {"phase": "Running"},
    }


def _prepared(uid: str, device: str, config: dict[str, Any] | None = None) -> dict[str, Any]:
    dev = {"request_names": ["acc"], "pool": NODE, "device": device, "cdi_device_ids": []}
    return {"namespace": "ns", "name": uid, "devices": [dev], "cdi_spec": {}, "config": config}


def _kinds(
    hw: hardware.Hardware,
    checkpoint: dict[str, dict[str, Any]],
    claims: list[dict[str, Any]],
) -> list[str]:
    node = NodeView(NODE, checkpoint, set(checkpoint), hw)
    view = ClusterView(claims, [_pod(c["metadata"]["name"]) for c in claims], {NODE: node}, 0.0)
    found = check(view, Tracker(), {NODE}, leak_grace=-1, hw_grace=-1, afu=nodes.AFU)
    return sorted(v.kind for v in found)


def _read(tmp: Path, profile: str) -> tuple[Path, hardware.Hardware]:
    setup = nodes.build(NODE, profile, tmp)
    for d in ("state", "cdi"):
        (tmp / d).mkdir(exist_ok=True)
    fpga = profile == nodes.FPGA_PROFILE
    return setup.host, hardware.read(setup.host, tmp / "state", tmp / "cdi", fpga=fpga)


def test_a_clean_host_passes_and_a_leaked_instance_setting_record_and_metadata_are_found(
    tmp_path: Path,
) -> None:
    host, hw = _read(tmp_path, "dgx-h100")
    assert _kinds(hw, {}, []) == []

    # planted on the host: a MIG instance no record names, a GPU left in exclusive-process mode
    desc = json.loads((host / ".synthetic/nvml.json").read_text())
    gpus = desc["gpus"]
    with mig_state.MigState(host / ".synthetic", gpus).locked() as s:
        s["7"]["instances"].append(
            {"gi": 9, "profile": "1g.10gb", "start": 6, "size": 1, "cis": [{"uuid": "MIG-x"}]}
        )
    with hoststate.locked_state(host) as st:
        hoststate.gpu_state(st, gpus[0]["uuid"])["computeMode"] = 3
    # ... and in the agent's state: a MIG record and a metadata directory of a gone claim
    record = {"claim": "gone", "device": "gpu-7-mig", "uuid": "MIG-y"}
    (tmp_path / "state/mig.json").write_text(json.dumps({"records": [record]}))
    (tmp_path / "state/dra-device-metadata/gone").mkdir(parents=True)
    hw = hardware.read(host, tmp_path / "state", tmp_path / "cdi", fpga=False)
    assert _kinds(hw, {}, []) == [
        "leaked-gpu-setting",
        "leaked-metadata",
        "leaked-mig-instance",
        "leaked-mig-record",
    ]
    # a prepared claim with a configuration may set the GPU: no longer a leak
    prepared = {"gone": _prepared("gone", "gpu-7-mig", {"gpu-7-mig": {"sharing": "MPS"}})}
    assert "leaked-gpu-setting" not in _kinds(hw, prepared, [])


def test_a_running_pods_mig_instance_gone_after_a_reboot_is_found(tmp_path: Path) -> None:
    host, _ = _read(tmp_path, "dgx-h100")
    gpus = json.loads((host / ".synthetic/nvml.json").read_text())["gpus"]
    with mig_state.MigState(host / ".synthetic", gpus).locked() as s:
        s["7"]["instances"].append(
            {"gi": 9, "profile": "1g.10gb", "start": 6, "size": 1, "cis": [{"uuid": "MIG-a"}]}
        )
    record = {"claim": "uid-a", "device": "gpu-7-mig-1g", "uuid": "MIG-a"}
    (tmp_path / "state/mig.json").write_text(json.dumps({"records": [record]}))
    checkpoint = {"uid-a": _prepared("uid-a", "gpu-7-mig-1g")}
    claims = [_claim("uid-a", "gpu-7-mig-1g")]
    read = hardware.read(host, tmp_path / "state", tmp_path / "cdi", fpga=False)
    assert _kinds(read, checkpoint, claims) == []
    # the agent's status.devices entry of it lost (an update the API server never got)
    del claims[0]["status"]["devices"]
    assert _kinds(read, checkpoint, claims) == ["status-missing"]
    mig_state.reboot(host)
    read = hardware.read(host, tmp_path / "state", tmp_path / "cdi", fpga=False)
    assert _kinds(read, checkpoint, claims) == ["device-missing"]


def test_an_fpga_without_its_claims_bitstream_is_found(tmp_path: Path) -> None:
    host, hw = _read(tmp_path, nodes.FPGA_PROFILE)
    device = sorted(hw.fpga_afu)[0]
    config = {device: {"bitstream": {"name": nodes.BITSTREAM, "digest": nodes.DIGEST}}}
    checkpoint = {"uid-f": _prepared("uid-f", device, config)}
    claims = [_claim("uid-f", device)]
    assert _kinds(hw, checkpoint, claims) == ["device-missing"]  # the card is empty
    for afu in (host / "sys/devices").rglob("afu_id"):
        afu.write_text(nodes.AFU + "\n")
    hw = hardware.read(host, tmp_path / "state", tmp_path / "cdi", fpga=True)
    assert hw.fpga_afu[device] == nodes.AFU
    assert _kinds(hw, checkpoint, claims) == []


def test_a_share_whose_cdi_limits_differ_from_its_allocation_is_found(tmp_path: Path) -> None:
    capacity = {"kubeacc.io/memory": "9537Mi", "kubeacc.io/cores": "10"}
    claims = [_claim("uid-s", "gpu-0", shareID="s1", consumedCapacity=capacity)]
    checkpoint = {"uid-s": _prepared("uid-s", "gpu-0")}
    spec: dict[str, Any] = {
        "containerEdits": {"env": ["KUBEACC_DEVICE_CORES_LIMIT=10"]},
        "devices": [
            {
                "name": "uid-s-gpu-0-s1",
                "containerEdits": {"env": ["KUBEACC_DEVICE_MEMORY_LIMIT=9537"]},
            }
        ],
    }
    cdi = tmp_path / "cdi"
    cdi.mkdir()
    (cdi / "kubeacc.io-claim_uid-s.json").write_text(json.dumps(spec))
    (tmp_path / "state").mkdir()
    hw = hardware.read(tmp_path / "nohost", tmp_path / "state", cdi, fpga=False)
    assert _kinds(hw, checkpoint, claims) == []
    spec["devices"][0]["containerEdits"] = {"env": ["KUBEACC_DEVICE_MEMORY_LIMIT=20000"]}
    (cdi / "kubeacc.io-claim_uid-s.json").write_text(json.dumps(spec))
    hw = hardware.read(tmp_path / "nohost", tmp_path / "state", cdi, fpga=False)
    assert _kinds(hw, checkpoint, claims) == ["device-missing"]
