"""Device metadata files for the containers (dra/metadata.py, KEP-5304): what prepare writes, the
CDI mount that brings each request's file in, removal at unprepare and at start."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from kubeacc.agent.dra import metadata
from kubeacc.agent.dra.driver import ClaimRef, Driver
from kubeacc.model import Inventory
from kubeacc.node import cdi

from .memclaims import NODE, Claims, memory_driver

GPU, GPU2 = "gpu-0000-1b-00-0", "gpu-0000-1d-00-0"


def _driver(tmp: Path, claims: Claims, inv: Inventory) -> Driver:
    d = memory_driver(tmp, claims, inv)
    d.device_metadata = True
    d.network = lambda ifname, with_ips: {"interfaceName": ifname, "ips": ["10.0.0.1/24"]}
    return d


def _docs(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_prepare_writes_each_requests_file_and_mounts_it_once(
    tmp_path: Path, dgx: Inventory
) -> None:
    claims = Claims()
    claims.add("c", "u1", [GPU, GPU2])
    nic = next(d for d in dgx.devices if d.type.value == "nic" and d.netdevs)
    obj = claims.objs[("ns", "c")]
    obj["status"]["allocation"]["devices"]["results"].append(
        {"request": "net/fast", "driver": "kubeacc.io", "pool": NODE, "device": nic.name}
    )
    driver = _driver(tmp_path, claims, dgx)
    (res,) = driver.prepare([ClaimRef("ns", "c", "u1")]).values()
    assert res.error == ""

    gpu_file = tmp_path / "state" / "dra-device-metadata" / "u1" / "r" / "metadata.json"
    docs = _docs(gpu_file)
    assert [d["apiVersion"] for d in docs] == [
        "metadata.resource.k8s.io/v1beta1",
        "metadata.resource.k8s.io/v1alpha1",
    ]
    assert docs[0]["kind"] == "DeviceMetadata" and docs[0] == {
        **docs[1],
        "apiVersion": docs[0]["apiVersion"],
    }
    assert docs[0]["metadata"] == {"name": "c", "namespace": "ns", "uid": "u1", "generation": 1}
    [req] = docs[0]["requests"]
    assert req["name"] == "r" and [d["name"] for d in req["devices"]] == [GPU, GPU2]
    first = req["devices"][0]
    assert (first["driver"], first["pool"]) == ("kubeacc.io", NODE)
    assert first["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:1b:00.0"}
    assert first["attributes"]["uuid"]["string"].startswith("GPU-")

    net_file = gpu_file.parent.parent / "net" / "metadata.json"
    [net_req] = _docs(net_file)[0]["requests"]
    assert net_req["name"] == "net/fast"  # the sub-request; the file is its request's
    assert net_req["devices"][0]["networkData"] == {
        "interfaceName": nic.netdevs[0],
        "ips": ["10.0.0.1/24"],
    }

    spec = json.loads(cdi.spec_path(tmp_path / "cdi", "u1").read_text())
    mounts = [[m for m in d["containerEdits"].get("mounts", [])] for d in spec["devices"]]
    base = "/var/run/kubernetes.io/dra-device-attributes/resourceclaims/c"
    assert [[(m["hostPath"], m["containerPath"]) for m in ms] for ms in mounts] == [
        [(str(gpu_file), f"{base}/r/kubeacc.io-metadata.json")],
        [],  # the request's second device: already mounted with the first
        [(str(net_file), f"{base}/net/kubeacc.io-metadata.json")],
    ]
    assert all("ro" in m["options"] for ms in mounts for m in ms)

    assert driver.unprepare([ClaimRef("ns", "c", "u1")]) == {"u1": ""}
    assert not (tmp_path / "state" / "dra-device-metadata" / "u1").exists()


def test_template_claim_is_found_by_its_pod_claim_name(tmp_path: Path, dgx: Inventory) -> None:
    claims = Claims()
    claims.add("pod-gpu-x7k2p", "u3", [GPU])
    claims.objs[("ns", "pod-gpu-x7k2p")]["metadata"]["annotations"] = {
        "resource.kubernetes.io/pod-claim-name": "gpu"
    }
    driver = _driver(tmp_path, claims, dgx)
    (res,) = driver.prepare([ClaimRef("ns", "pod-gpu-x7k2p", "u3")]).values()
    assert res.error == ""
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", "u3").read_text())
    [mount] = spec["devices"][0]["containerEdits"]["mounts"]
    assert mount["containerPath"] == (
        "/var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/gpu/r/"
        "kubeacc.io-metadata.json"
    )
    path = tmp_path / "state" / "dra-device-metadata" / "u3" / "r" / "metadata.json"
    assert _docs(path)[0]["podClaimName"] == "gpu"


def test_a_hostile_pod_claim_name_is_refused_before_anything_is_written(
    tmp_path: Path, dgx: Inventory
) -> None:
    """A namespace user creates a claim with the annotation themselves: ``../..`` in it would
    lead the metadata mount anywhere in the container (over its programs); the claim is refused
    with the reason, nothing written, nothing prepared."""
    for bad in ("../../../../usr/local/lib", "gpu/../..", "GPU", "a" * 64, "x\n", "-gpu"):
        claims = Claims()
        claims.add("evil", "u9", [GPU])
        claims.objs[("ns", "evil")]["metadata"]["annotations"] = {
            metadata.POD_CLAIM_ANNOTATION: bad
        }
        driver = _driver(tmp_path / bad.replace("/", "_"), claims, dgx)
        (res,) = driver.prepare([ClaimRef("ns", "evil", "u9")]).values()
        assert res.error.startswith("ResourceClaim ns/evil: annotation "), res.error
        assert "is not a pod claim name" in res.error
        assert driver.prepared() == {}
        top = tmp_path / bad.replace("/", "_")
        assert not cdi.spec_path(top / "cdi", "u9").exists()
        assert not (top / "state" / "dra-device-metadata" / "u9").exists()


def test_start_removes_files_of_claims_no_longer_prepared(tmp_path: Path, dgx: Inventory) -> None:
    claims = Claims()
    claims.add("c", "u1", [GPU])
    driver = _driver(tmp_path, claims, dgx)
    driver.prepare([ClaimRef("ns", "c", "u1")])
    metadata.write(tmp_path / "state", "gone", {"r": b"{}\n"})
    again = _driver(tmp_path, claims, dgx)
    again.reconcile()
    left = sorted(p.name for p in (tmp_path / "state" / "dra-device-metadata").iterdir())
    assert left == ["u1"]


def test_off_writes_nothing(tmp_path: Path, dgx: Inventory) -> None:
    claims = Claims()
    claims.add("c", "u1", [GPU])
    driver = _driver(tmp_path, claims, dgx)
    driver.device_metadata = False
    driver.prepare([ClaimRef("ns", "c", "u1")])
    assert not (tmp_path / "state" / "dra-device-metadata").exists()
    spec = json.loads(cdi.spec_path(tmp_path / "cdi", "u1").read_text())
    assert "mounts" not in spec["devices"][0]["containerEdits"]


def test_a_failed_write_fails_the_claim_and_leaves_nothing(tmp_path: Path, dgx: Inventory) -> None:
    claims = Claims()
    claims.add("c", "u1", [GPU])
    driver = _driver(tmp_path, claims, dgx)
    (tmp_path / "state").mkdir(exist_ok=True)
    (tmp_path / "state" / "dra-device-metadata").write_text("in the way")
    (res,) = driver.prepare([ClaimRef("ns", "c", "u1")]).values()
    assert res.error.startswith("writing the device metadata failed: ")
    assert not cdi.spec_path(tmp_path / "cdi", "u1").exists()
    assert driver.prepared() == {}


def test_start_makes_again_the_files_a_crash_took(tmp_path: Path, dgx: Inventory) -> None:
    """The files are written without fsync: a missing or torn one is made again from the
    checkpoint and the CDI spec's mount (a template claim's pod claim name included)."""
    claims = Claims()
    claims.add("pod-gpu-x7k2p", "u3", [GPU, GPU2])
    claims.objs[("ns", "pod-gpu-x7k2p")]["metadata"]["annotations"] = {
        "resource.kubernetes.io/pod-claim-name": "gpu"
    }
    claims.add("plain", "u4", [GPU])
    _driver(tmp_path, claims, dgx).prepare(
        [ClaimRef("ns", "pod-gpu-x7k2p", "u3"), ClaimRef("ns", "plain", "u4")]
    )
    torn = tmp_path / "state" / "dra-device-metadata" / "u3" / "r" / "metadata.json"
    gone = tmp_path / "state" / "dra-device-metadata" / "u4" / "r" / "metadata.json"
    before = {p: p.read_bytes() for p in (torn, gone)}
    torn.write_bytes(before[torn][:40])  # cut short
    gone.unlink()
    _driver(tmp_path, Claims(), dgx).reconcile()  # no API server needed
    assert {p: p.read_bytes() for p in (torn, gone)} == before
    assert _docs(torn)[0]["podClaimName"] == "gpu"


def test_remove_takes_whatever_the_claims_directory_holds(tmp_path: Path) -> None:
    state = tmp_path / "state"
    metadata.write(state, "u1", {"r": b"{}\n", "net": b"{}\n"})
    metadata.write(state, "u2", {"r": b"{}\n"})
    top = state / "dra-device-metadata"
    (top / "u1" / "r" / ".metadata.json.tmp").write_bytes(b"{")  # a crash mid-write left it
    (top / "u1" / "stray").write_bytes(b"")  # not a request directory
    metadata.remove(state, "u1")
    metadata.remove(state, "u2")  # the plain case: its files by name
    metadata.remove(state, "u3")  # never written (metadata off): nothing to do
    assert list(top.iterdir()) == []
