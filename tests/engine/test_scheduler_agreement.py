"""Our allocator and the real kube-scheduler agree on which claims fit.

A seeded corpus of claims (counts, All, firstAvailable, CEL with quantity and semver,
matchAttribute on NUMA node and PCIe root) is judged by the engine and, one claim at a time, by
the testbed's scheduler against the same ResourceSlice (the synthetic 8-GPU server as
discovered) and DeviceClass. Verdicts must match; for claims that fit, so must the number of
devices per request and the subrequest firstAvailable picked. Device names are not compared:
among equally good devices the two may choose differently.
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.engine.engine import Engine
from kubeacc.model import DeviceType
from kubeacc.synthetic import profiles
from kubeacc.testbed.testbed import Testbed
from tests.hosts import discover
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster

DRIVER = "xcheck.kubeacc.io"
CLASS = "xcheck-gpu"


def _slice(node: str, host: Path) -> dict[str, Any]:
    devices = []
    for dev in discover(host).by_type(DeviceType.GPU):
        devices.append(
            {
                "name": dev.name,
                "attributes": {
                    "model": {"string": "h100" if dev.index < 6 else "a100"},
                    "numaNode": {"int": dev.numa_node},
                    "driverVersion": {"version": "550.90.7" if dev.index % 2 else "535.104.5"},
                    "resource.kubernetes.io/pcieRoot": {"string": dev.pcie_root},
                },
                "capacity": {"memory": {"value": "80Gi" if dev.index < 6 else "40Gi"}},
            }
        )
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-xcheck"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": devices,
        },
    }


DEVICE_CLASS = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "DeviceClass",
    "metadata": {"name": CLASS},
    "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
}

SELECTORS = [
    None,
    f'device.attributes["{DRIVER}"].model == "h100"',
    f'device.attributes["{DRIVER}"].model == "a100"',
    f'device.capacity["{DRIVER}"].memory.compareTo(quantity("64Gi")) >= 0',
    f'device.attributes["{DRIVER}"].driverVersion.isGreaterThan(semver("540.0.0"))',
    f'device.attributes["{DRIVER}"].numaNode == 1',
]
CONSTRAINTS = [None, f"{DRIVER}/numaNode", "resource.kubernetes.io/pcieRoot"]


def _exactly(rng: random.Random) -> dict[str, Any]:
    req: dict[str, Any] = {"deviceClassName": CLASS}
    if rng.random() < 0.15:
        req["allocationMode"] = "All"
    else:
        req["count"] = rng.choice([1, 1, 2, 2, 3, 4, 5, 7])
    sel = rng.choice(SELECTORS)
    if sel:
        req["selectors"] = [{"cel": {"expression": sel}}]
    return req


def corpus(seed: int, size: int) -> list[dict[str, Any]]:
    rng = random.Random(seed)
    claims = []
    for i in range(size):
        requests: list[dict[str, Any]] = []
        for r in range(rng.choice([1, 1, 2])):
            if rng.random() < 0.25:
                subs = [{"name": f"s{k}", **_exactly(rng)} for k in range(rng.choice([2, 3]))]
                requests.append({"name": f"r{r}", "firstAvailable": subs})
            else:
                requests.append({"name": f"r{r}", "exactly": _exactly(rng)})
        spec: dict[str, Any] = {"devices": {"requests": requests}}
        attr = rng.choice(CONSTRAINTS)
        if attr:
            spec["devices"]["constraints"] = [{"matchAttribute": attr}]
        claims.append(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": f"xc-{i}"},
                "spec": spec,
            }
        )
    return claims


def _shape(results: list[dict[str, Any]]) -> dict[str, int]:
    """Devices per request (``r0`` or ``r0/s1``), the part both allocators must agree on."""
    shape: dict[str, int] = {}
    for r in results:
        shape[r["request"]] = shape.get(r["request"], 0) + 1
    return shape


def _scheduler_verdict(
    client: Client, claim: dict[str, Any], namespace: str
) -> dict[str, int] | None:
    name = claim["metadata"]["name"]
    client.create(from_dict({**claim, "metadata": {"name": name, "namespace": namespace}}))
    client.create(
        from_dict(
            {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {"name": name, "namespace": namespace},
                "spec": {
                    "containers": [
                        {
                            "name": "c",
                            "image": "registry.k8s.io/pause:3.10",
                            "resources": {"claims": [{"name": "acc"}]},
                        }
                    ],
                    "resourceClaims": [{"name": "acc", "resourceClaimName": name}],
                },
            }
        )
    )

    def decided() -> tuple[str, Any] | None:
        c = client.get(ResourceClaim, name, namespace=namespace)
        if c.status and c.status.allocation and c.status.allocation.devices:
            return ("fit", [r.to_dict() for r in c.status.allocation.devices.results or []])
        p = client.get(Pod, name, namespace=namespace)
        for cond in (p.status.conditions if p.status else None) or []:
            # "SchedulerError": the upstream allocator fails the claim outright (e.g. an
            # allocationMode All request whose devices break a constraint).
            if cond.type == "PodScheduled" and cond.reason in ("Unschedulable", "SchedulerError"):
                return ("no", cond.message)
        return None

    verdict, detail = eventually(decided, 60, f"the scheduler's verdict on {name}")
    client.delete(Pod, name, namespace=namespace, grace_period=0)
    eventually(lambda: _gone(client, Pod, name, namespace), 60, f"pod {name} deleted")
    client.delete(ResourceClaim, name, namespace=namespace)
    eventually(lambda: _gone(client, ResourceClaim, name, namespace), 60, f"claim {name} gone")
    return _shape(detail) if verdict == "fit" else None


def _gone(client: Client, kind: Any, name: str, namespace: str) -> bool:
    return name not in {o.metadata.name for o in client.list(kind, namespace=namespace)}


def test_engine_agrees_with_kube_scheduler(
    testbed: Testbed, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    slice_obj = _slice(testbed.node_name, profiles.build("dgx-h100", tmp_path / "host"))
    kube_client.create(from_dict(slice_obj))
    kube_client.create(from_dict(DEVICE_CLASS))
    engine_nodes = [{"metadata": {"name": testbed.node_name, "labels": {}}}]
    claims = corpus(seed=7, size=18)
    disagreements = []
    verdicts = {"fit": 0, "no": 0}
    for claim in claims:
        engine = Engine([slice_obj], [DEVICE_CLASS], nodes=engine_nodes)
        placed = engine.allocate(claim)
        ours = _shape(placed.allocation["devices"]["results"]) if placed.allocation else None
        theirs = _scheduler_verdict(kube_client, claim, namespace)
        verdicts["fit" if theirs is not None else "no"] += 1
        if ours != theirs:
            disagreements.append((claim["metadata"]["name"], claim["spec"], ours, theirs))
    assert not disagreements, disagreements
    assert verdicts["fit"] >= 4 and verdicts["no"] >= 3, f"corpus too one-sided: {verdicts}"
