"""The sample ResourceClaims and pods of ``kubeacc demo`` (plain API objects)."""

from __future__ import annotations

from typing import Any

from kubeacc.agent.dra import DRIVER_NAME

H100 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")'
H200 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H200")'
NOT_A_VF = '!("sriovVF" in device.attributes["kubeacc.io"])'
BITSTREAM_DIGEST = "sha256:" + "5e" * 32


def _req(name: str, cls: str, count: int = 1, cel: str | None = None) -> dict[str, Any]:
    exactly: dict[str, Any] = {"deviceClassName": cls, "count": count}
    if cel:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    return {"name": name, "exactly": exactly}


#: claim name -> (what it shows, claim spec)
CLAIMS: dict[str, tuple[str, dict[str, Any]]] = {
    "any-gpu": (
        "any GPU (DeviceClass gpu.kubeacc.io)",
        {"devices": {"requests": [_req("gpu", "gpu.kubeacc.io")]}},
    ),
    "h100": (
        "an H100, by CEL selector on kubeacc.io/model",
        {"devices": {"requests": [_req("gpu", "gpu.kubeacc.io", cel=H100)]}},
    ),
    "gpus-nic-same-root": (
        "2 GPUs + a NIC on one PCIe root (matchAttribute resource.kubernetes.io/pcieRoot)",
        {
            "devices": {
                "requests": [
                    _req("gpus", "gpu.kubeacc.io", count=2),
                    _req("nic", "nic.kubeacc.io", cel=NOT_A_VF),
                ],
                "constraints": [{"matchAttribute": "resource.kubernetes.io/pcieRoot"}],
            }
        },
    ),
    "h200-or-xpu": (
        "firstAvailable: an H200, else a KunLun XPU",
        {
            "devices": {
                "requests": [
                    {
                        "name": "acc",
                        "firstAvailable": [
                            {
                                "name": "h200",
                                "deviceClassName": "gpu.kubeacc.io",
                                "selectors": [{"cel": {"expression": H200}}],
                            },
                            {"name": "xpu", "deviceClassName": "xpu.kubeacc.io"},
                        ],
                    }
                ]
            }
        },
    ),
    "fpga-bitstream": (
        "an Intel FPGA with FpgaConfig (bitstream to program)",
        {
            "devices": {
                "requests": [
                    _req(
                        "fpga",
                        "fpga.kubeacc.io",
                        cel='device.attributes["kubeacc.io"].vendor == "Intel"',
                    )
                ],
                "config": [
                    {
                        "requests": ["fpga"],
                        "opaque": {
                            "driver": DRIVER_NAME,
                            "parameters": {
                                "apiVersion": "kubeacc.io/v1alpha1",
                                "kind": "FpgaConfig",
                                "bitstream": {
                                    "name": "crypto-offload-v3",
                                    "digest": BITSTREAM_DIGEST,
                                },
                            },
                        },
                    }
                ],
            }
        },
    ),
    "vf": (
        "one SR-IOV virtual function (a device of its own)",
        {
            "devices": {
                "requests": [
                    _req(
                        "vf",
                        "nic.kubeacc.io",
                        cel='"sriovVF" in device.attributes["kubeacc.io"]',
                    )
                ]
            }
        },
    ),
}


def claim(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": CLAIMS[name][1],
    }


def pod(claim_name: str, namespace: str) -> dict[str, Any]:
    # Nodes without a kubelet never become Ready; tolerate that so the scheduler still places
    # the pod (and allocates its claim) there.
    tolerations = [
        {"key": f"node.kubernetes.io/{t}", "operator": "Exists"}
        for t in ("not-ready", "unreachable")
    ]
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{claim_name}-pod", "namespace": namespace},
        "spec": {
            "terminationGracePeriodSeconds": 0,
            "tolerations": tolerations,
            "resourceClaims": [{"name": "acc", "resourceClaimName": claim_name}],
            "containers": [
                {
                    "name": "app",
                    "image": "registry.example/app:1",
                    "resources": {"claims": [{"name": "acc"}]},
                }
            ],
        },
    }
