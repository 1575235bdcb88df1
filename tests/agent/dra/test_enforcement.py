"""What enforces a GPU share in its container: the CDI edits of a DRA share and the Allocate
answer of a device-plugin share (the library mounted read-only and preloaded, MPS, or advisory),
the admin's switch, and the library's copy to the host."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeacc.agent.dra.driver import ClaimRef
from kubeacc.agent.users import device_plugin_users, dra_users
from kubeacc.contracts.unitid import id_gpu_key
from kubeacc.deviceplugin.allocation import AllocationError
from kubeacc.deviceplugin.config import parse_config
from kubeacc.deviceplugin.manager import DevicePluginManager
from kubeacc.deviceplugin.shared import MEMORY_RESOURCE as MEMORY
from kubeacc.deviceplugin.shared import Found, Kind, shared_allocate
from kubeacc.model import DeviceType, Inventory
from kubeacc.node import cdi
from kubeacc.node.kubeletapi import podresources_v1_pb2 as pr
from kubeacc.node.shareaccount import AccountService
from kubeacc.node.sharelimit import (
    CONTAINER_LIBRARY,
    REQUIRED_LABEL,
    EditsError,
    Enforcement,
    Limiter,
    Requirement,
    install,
    required_of,
)
from tests.agent.dra.sharing.test_sharing import GPU0, Claims, make_driver, share, spec_env
from tests.hosts import HostFactory, discover

LIB = Path("/var/lib/kubeacc/native/libkubeacc-sharelimit.so")


def gpu_config(source: str, **fields: Any) -> dict[str, Any]:
    params = {"apiVersion": "kubeacc.io/v1alpha1", "kind": "GpuConfig", **fields}
    return {"source": source, "opaque": {"driver": "kubeacc.io", "parameters": params}}


def prepare(
    tmp_path: Path, dgx: Inventory, limiter: Limiter, *configs: dict[str, Any], whole: bool = False
) -> tuple[str, dict[str, Any]]:
    claims = Claims()
    result = {"device": GPU0} if whole else share(GPU0, "s1", "4Gi")
    claims.add("a", "u1", [result])
    claims.objs[("ns", "a")]["status"]["allocation"]["devices"]["config"] = list(configs)
    driver = make_driver(tmp_path, claims, dgx, limiter=limiter)
    out = driver.prepare([ClaimRef("ns", "a", "u1")])
    spec = (
        json.loads(cdi.spec_path(tmp_path / "cdi", "u1").read_text()) if not out["u1"].error else {}
    )
    driver.checkpoint.close()
    return out["u1"].error, spec


def share_device(spec: dict[str, Any]) -> dict[str, Any]:
    (dev,) = spec["devices"]
    edits: dict[str, Any] = dev["containerEdits"]
    return edits


def test_a_dra_share_gets_the_library_read_only_and_preloaded(
    tmp_path: Path, dgx: Inventory
) -> None:
    accounts = AccountService(tmp_path / "acc")
    err, spec = prepare(tmp_path, dgx, Limiter(LIB, accounts))
    assert err == ""
    env = spec_env(tmp_path, "u1", f"u1-{GPU0}-s1")
    assert env["LD_PRELOAD"] == CONTAINER_LIBRARY
    # One account per claim, in the agent's service, its directory read-only in the container.
    assert env["KUBEACC_SHARELIMIT_SOCKET"] == "/run/kubeacc/sharelimit/account.sock"
    assert env["KUBEACC_SHARE_ENFORCEMENT"] == "library"
    assert env["KUBEACC_DEVICE_MEMORY_LIMIT"] == "4096"
    ro = ["ro", "nosuid", "nodev", "bind"]
    assert share_device(spec)["mounts"] == [
        {"hostPath": str(LIB), "containerPath": CONTAINER_LIBRARY, "options": ro},
        {
            "hostPath": str(tmp_path / "acc" / "c-u1"),
            "containerPath": "/run/kubeacc/sharelimit",
            "options": ro,
        },
    ]
    assert accounts.names() == {"c-u1"}
    accounts.stop()


def test_a_whole_gpu_gets_no_library(tmp_path: Path, dgx: Inventory) -> None:
    err, spec = prepare(tmp_path, dgx, Limiter(LIB), whole=True)
    assert err == ""
    edits = share_device(spec)
    assert "mounts" not in edits
    assert not any(e.startswith(("LD_PRELOAD=", "KUBEACC_SHARE")) for e in edits["env"])


def test_without_the_library_a_share_is_advisory(tmp_path: Path, dgx: Inventory) -> None:
    err, spec = prepare(tmp_path, dgx, Limiter(None))
    assert err == ""
    env = spec_env(tmp_path, "u1", f"u1-{GPU0}-s1")
    assert env["KUBEACC_SHARE_ENFORCEMENT"] == "advisory"
    assert "LD_PRELOAD" not in env and "mounts" not in share_device(spec)


def test_the_class_can_turn_enforcement_off(tmp_path: Path, dgx: Inventory) -> None:
    # The claim's own "enforce: true" does not turn it back on: the class is the admin's.
    err, _ = prepare(
        tmp_path,
        dgx,
        Limiter(LIB),
        gpu_config("FromClass", enforce=False),
        gpu_config("FromClaim", enforce=True),
    )
    assert err == ""
    env = spec_env(tmp_path, "u1", f"u1-{GPU0}-s1")
    assert env["KUBEACC_SHARE_ENFORCEMENT"] == "advisory" and "LD_PRELOAD" not in env


def test_a_claim_cannot_turn_enforcement_off(tmp_path: Path, dgx: Inventory) -> None:
    err, _ = prepare(tmp_path, dgx, Limiter(LIB), gpu_config("FromClaim", enforce=False))
    assert "enforce: false is honoured only from a DeviceClass" in err
    assert not cdi.spec_path(tmp_path / "cdi", "u1").exists()


def test_enforcement_by_vendor_and_mps() -> None:
    lib, none = Limiter(LIB), Limiter(None)
    assert lib.enforcement("NVIDIA", mps=False) is Enforcement.LIBRARY
    assert lib.enforcement("NVIDIA", mps=True) is Enforcement.MPS
    assert none.enforcement("NVIDIA", mps=True) is Enforcement.MPS  # MPS needs no library
    assert lib.enforcement("NVIDIA", mps=True, enforce=False) is Enforcement.ADVISORY
    assert lib.enforcement("AMD", mps=False) is Enforcement.ADVISORY  # no interception point
    assert lib.enforcement("KunLun", mps=False) is Enforcement.ADVISORY
    env, mounts = lib.edits(Enforcement.MPS, "u1", "1024")
    assert env == {"KUBEACC_SHARE_ENFORCEMENT": "mps"} and mounts == []
    env, mounts = lib.edits(Enforcement.LIBRARY, "u1", "1024")
    assert "KUBEACC_SHARELIMIT_SOCKET" not in env  # no service: each process its own account
    assert mounts == [(str(LIB), "/usr/local/lib/kubeacc/libkubeacc-sharelimit.so")]


def test_a_library_share_gets_its_account_read_only(tmp_path: Path) -> None:
    accounts = AccountService(tmp_path / "acc")
    lib = Limiter(LIB, accounts)
    env, mounts = lib.edits(Enforcement.LIBRARY, "c-u1", "1024,512")
    assert env["KUBEACC_SHARELIMIT_SOCKET"] == "/run/kubeacc/sharelimit/account.sock"
    assert mounts[1] == (str(tmp_path / "acc" / "c-u1"), "/run/kubeacc/sharelimit")
    assert (tmp_path / "acc" / "c-u1" / "limits").read_text() == "1024,512\n"
    with pytest.raises(EditsError, match="expected"):
        lib.edits(Enforcement.LIBRARY, "../x", "1024")
    # Idle (no process connected): a container of that name again, with other limits.
    lib.edits(Enforcement.LIBRARY, "c-u1", "2048")
    assert (tmp_path / "acc" / "c-u1" / "limits").read_text() == "2048\n"
    lib.close("c-u1")
    assert not (tmp_path / "acc" / "c-u1").exists()
    accounts.stop()


def test_install_copies_the_library_to_the_host_once(tmp_path: Path) -> None:
    src = tmp_path / "image" / "lib.so"
    src.parent.mkdir()
    src.write_bytes(b"\x7fELF library")
    target = install(src, tmp_path / "state")
    assert target == tmp_path / "state" / "native" / "libkubeacc-sharelimit.so"
    assert target.read_bytes() == src.read_bytes() and target.stat().st_mode & 0o777 == 0o755
    mtime = target.stat().st_mtime_ns
    assert install(src, tmp_path / "state") == target and target.stat().st_mtime_ns == mtime
    assert install(tmp_path / "missing.so", tmp_path / "state") is None


@pytest.fixture
def edge(hosts: HostFactory) -> Inventory:
    return discover(hosts.pristine("edge-mixed"), nvml="on")


@pytest.mark.parametrize("enforce", [True, False])
def test_a_device_plugin_memory_share_gets_the_library(
    edge: Inventory, enforce: bool, tmp_path: Path
) -> None:
    gpus = {d.pci_bus_id: d for d in edge.by_type(DeviceType.GPU) if d.pci_bus_id}
    (bdf,) = gpus
    found = Found("ns/train", "main", (bdf,), memory=4096, cores=0)
    accounts = AccountService(tmp_path / "acc")
    limiter = Limiter(LIB, accounts) if enforce else None
    got = shared_allocate(Kind.MEMORY, found, gpus, None, limiter)
    accounts.stop()
    if enforce:
        assert got.envs["LD_PRELOAD"] == CONTAINER_LIBRARY
        assert got.envs["KUBEACC_SHARELIMIT_SOCKET"] == "/run/kubeacc/sharelimit/account.sock"
        (name,) = accounts.names() or [p.name for p in (tmp_path / "acc").iterdir()]
        assert (
            name.startswith("p-") and (tmp_path / "acc" / name / "limits").read_text() == "4096\n"
        )
        assert got.read_only_mounts == [
            (str(LIB), CONTAINER_LIBRARY),
            (str(tmp_path / "acc" / name), "/run/kubeacc/sharelimit"),
        ]
    else:
        assert "LD_PRELOAD" not in got.envs and got.read_only_mounts == []
    assert got.envs["KUBEACC_SHARE_ENFORCEMENT"] == ("library" if enforce else "advisory")
    cores = shared_allocate(Kind.CORES, Found("ns/train", "main", (bdf,), 0, 30), gpus, None)
    assert "LD_PRELOAD" not in cores.envs  # the cores resource adds no library


def test_status_and_metrics_say_how_each_share_is_enforced(tmp_path: Path, dgx: Inventory) -> None:
    claims = Claims()
    claims.add("a", "u1", [share(GPU0, "s1", "4Gi")])
    claims.add("b", "u2", [share(GPU0, "s2", "4Gi")])
    claims.objs[("ns", "b")]["status"]["allocation"]["devices"]["config"] = [
        gpu_config("FromClass", enforce=False)
    ]
    driver = make_driver(tmp_path, claims, dgx, limiter=Limiter(LIB))
    driver.prepare([ClaimRef("ns", "a", "u1"), ClaimRef("ns", "b", "u2")])
    users = dra_users(driver.prepared(), lambda *_: None, [GPU0])
    assert users[GPU0] == [
        {
            "kind": "ResourceClaim",
            "namespace": "ns",
            "name": "a",
            "uid": "u1",
            "enforcement": "library",
        },
        {
            "kind": "ResourceClaim",
            "namespace": "ns",
            "name": "b",
            "uid": "u2",
            "enforcement": "advisory",
        },
    ]
    registry = driver.metrics.registry

    def shares(how: str) -> float | None:
        return registry.get_sample_value("kubeacc_agent_shares", {"enforcement": how})

    assert (shares("library"), shares("advisory"), shares("mps")) == (1, 1, 0)
    driver.unprepare([ClaimRef("ns", "a", "u1")])
    assert (shares("library"), shares("advisory")) == (0, 1)
    driver.checkpoint.close()


def test_device_plugin_users_say_how_memory_shares_are_enforced() -> None:
    pod = pr.PodResources(
        name="train",
        namespace="ns",
        containers=[
            pr.ContainerResources(
                name="main",
                devices=[pr.ContainerDevices(resource_name=MEMORY, device_ids=["m0-1", "m0-2"])],
            )
        ],
    )
    # memory unit IDs are "m<position>-<unit>": m0 is the resource's first GPU
    users = device_plugin_users(
        [pod], {}, {(MEMORY, GPU0): "library"}, shared_ids={(MEMORY, "m0"): GPU0}
    )
    assert users == {
        GPU0: [{"kind": "Pod", "namespace": "ns", "name": "train", "enforcement": "library"}]
    }


def test_every_shared_unit_id_names_its_gpu(tmp_path: Path, hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"), nvml="on")
    cfg = parse_config({"types": {"gpu": {"shared": True}}})
    manager = DevicePluginManager(tmp_path, cfg, limiter=Limiter(LIB))
    keys = manager.shared_id_devices(inv)
    for resource, state in manager.states(inv).items():
        for dev in state.listing():
            owner = keys[(resource, id_gpu_key(dev.ID))]
            assert owner in {d.name for d in state.devices.values()}
    by_name = {d.name: d for d in inv.devices}
    assert all(by_name[n].type is DeviceType.GPU for n in keys.values())
    enforcement = manager.share_enforcement(inv)
    assert set(enforcement.values()) == {"library"}


def untrusted(need: str) -> Requirement:
    """Namespace ``ns`` labelled ``kubeacc.io/share-enforcement=<need>``, others unlabelled."""
    return lambda ns: required_of({REQUIRED_LABEL: need} if ns == "ns" else {})


def test_a_namespace_that_requires_mps_refuses_a_library_share(
    tmp_path: Path, dgx: Inventory
) -> None:
    err, _ = prepare(tmp_path, dgx, Limiter(LIB, required=untrusted("mps")))
    assert "namespace ns requires memory shares enforced by mps" in err
    assert "this share would be enforced by library" in err and "sharing strategy MPS" in err
    assert not cdi.spec_path(tmp_path / "cdi", "u1").exists()
    # A whole GPU is no share: nothing to refuse.
    err, _ = prepare(tmp_path / "w", dgx, Limiter(LIB, required=untrusted("mps")), whole=True)
    assert err == ""


def test_a_namespace_that_requires_the_library_refuses_an_advisory_share(
    tmp_path: Path, dgx: Inventory
) -> None:
    limiter = Limiter(LIB, required=untrusted("library"))
    err, _ = prepare(tmp_path, dgx, limiter, gpu_config("FromClass", enforce=False))
    assert "requires memory shares enforced by library" in err and "by advisory" in err
    err, _ = prepare(tmp_path / "ok", dgx, limiter)
    assert err == ""


def test_an_unknown_requirement_refuses_the_share(tmp_path: Path, dgx: Inventory) -> None:
    err, _ = prepare(tmp_path, dgx, Limiter(LIB, required=untrusted("strong")))
    assert "label kubeacc.io/share-enforcement='strong': expected one of" in err


@pytest.mark.parametrize("need", ["mps", "bogus"])
def test_a_device_plugin_share_in_a_namespace_that_requires_more_is_refused(
    edge: Inventory, need: str
) -> None:
    gpus = {d.pci_bus_id: d for d in edge.by_type(DeviceType.GPU) if d.pci_bus_id}
    (bdf,) = gpus
    found = Found("ns/train", "main", (bdf,), memory=4096, cores=0)
    with pytest.raises(AllocationError, match=r"pod ns/train container main: .*share-enforcement"):
        shared_allocate(Kind.MEMORY, found, gpus, None, Limiter(LIB, required=untrusted(need)))
    other = Found("other/train", "main", (bdf,), memory=4096, cores=0)
    got = shared_allocate(Kind.MEMORY, other, gpus, None, Limiter(LIB, required=untrusted(need)))
    assert got.envs["KUBEACC_SHARE_ENFORCEMENT"] == "library"
