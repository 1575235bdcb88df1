"""Small builders for API-shaped dicts used by the engine tests."""

from __future__ import annotations

from typing import Any

DRIVER = "kubeacc.io"
GPU_CLASS_SEL = 'device.driver == "kubeacc.io" && device.attributes["kubeacc.io"].type == "gpu"'


def gpu(
    name: str,
    *,
    numa: int = 0,
    root: str = "pci0000:10",
    model: str = "h100",
    memory: str = "80Gi",
    version: str = "535.104.5",
    **extra: Any,
) -> dict[str, Any]:
    d: dict[str, Any] = {
        "name": name,
        "attributes": {
            "type": {"string": "gpu"},
            "model": {"string": model},
            "numaNode": {"int": numa},
            "driverVersion": {"version": version},
            "resource.kubernetes.io/pcieRoot": {"string": root},
        },
        "capacity": {"memory": {"value": memory}},
    }
    d.update(extra)
    return d


def node_gpus(n: int = 8, per_root: int = 2, per_numa: int = 4, **kw: Any) -> list[dict[str, Any]]:
    return [
        gpu(f"gpu-{i}", numa=i // per_numa, root=f"pci0000:{(i // per_root) * 16 + 16:02x}", **kw)
        for i in range(n)
    ]


def slice_(
    node: str | None,
    devices: list[dict[str, Any]],
    *,
    pool: str | None = None,
    generation: int = 1,
    count: int = 1,
    name: str | None = None,
    **spec: Any,
) -> dict[str, Any]:
    s: dict[str, Any] = {
        "driver": DRIVER,
        "pool": {
            "name": pool or node or "shared",
            "generation": generation,
            "resourceSliceCount": count,
        },
        "devices": devices,
    }
    if node is not None:
        s["nodeName"] = node
    s.update(spec)
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": name or f"{node}-{pool or 'p'}-{generation}"},
        "spec": s,
    }


def device_class(
    name: str = "gpu.kubeacc.io",
    sel: str = GPU_CLASS_SEL,
    config: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    spec: dict[str, Any] = {"selectors": [{"cel": {"expression": sel}}]}
    if config:
        spec["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": spec,
    }


def exactly(
    name: str = "gpus",
    count: int = 1,
    cls: str = "gpu.kubeacc.io",
    selectors: list[str] | None = None,
    **kw: Any,
) -> dict[str, Any]:
    e: dict[str, Any] = {"deviceClassName": cls, "count": count, **kw}
    if selectors:
        e["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": e}


def claim(
    *requests: dict[str, Any],
    name: str = "c",
    constraints: list[dict[str, Any]] | None = None,
    config: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    if config:
        devices["config"] = config
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def allocated(
    node: str, *devices: str, pool: str | None = None, admin: bool = False
) -> dict[str, Any]:
    res = [
        {
            "request": "r",
            "driver": DRIVER,
            "pool": pool or node,
            "device": d,
            **({"adminAccess": True} if admin else {}),
        }
        for d in devices
    ]
    return {"metadata": {"name": "old"}, "status": {"allocation": {"devices": {"results": res}}}}


def devices_of(placement_alloc: dict[str, Any]) -> list[str]:
    return [r["device"] for r in placement_alloc["devices"]["results"]]
