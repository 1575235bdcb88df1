"""The sample AcceleratorPolicies, ResourceClaims and pods of ``kubeacc demo`` (plain API
objects)."""

from __future__ import annotations

from typing import Any

from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.synthetic.bitstreams import bitstream

H200 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H200")'
NOT_A_VF = '!("sriovVF" in device.attributes["kubeacc.io"])'
ARRIA10 = 'device.attributes["kubeacc.io"].model == "PAC with Arria 10 GX FPGA"'
#: What the FPGA claim programs: a file of the node's bitstream library (kubeacc.synthetic).
BITSTREAM = bitstream("crypto-offload-v3.gbs")

#: The admin's policies: which bitstreams may be programmed onto the Intel FPGAs, and the H100s
#: as a class of their own (each policy generates a DeviceClass <name>.policy.kubeacc.io).
POLICIES: dict[str, dict[str, Any]] = {
    "fpga-crypto": {
        "selector": {"types": ["fpga"], "vendors": ["Intel"]},
        "allowedBitstreams": [{"name": BITSTREAM.name, "sha256": BITSTREAM.sha256}],
        "onUnhealthy": "Drain",
    },
    "h100": {
        "selector": {"types": ["gpu"], "models": ["NVIDIA H100 80GB HBM3"]},
        "sharing": {"mode": "Exclusive", "maxConsumers": 1},
    },
}


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
        "an H100, from the DeviceClass the h100 AcceleratorPolicy generates",
        {"devices": {"requests": [_req("gpu", "h100.policy.kubeacc.io")]}},
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
        "an Arria 10 FPGA programmed with a bitstream (FpgaConfig)",
        {
            "devices": {
                "requests": [_req("fpga", "fpga.kubeacc.io", cel=ARRIA10)],
                "config": [fpga_claim_config(BITSTREAM.name, f"sha256:{BITSTREAM.sha256}")],
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


def policy(name: str) -> dict[str, Any]:
    return {
        "apiVersion": "kubeacc.io/v1alpha1",
        "kind": "AcceleratorPolicy",
        "metadata": {"name": name},
        "spec": POLICIES[name],
    }


def claim(name: str, namespace: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": CLAIMS[name][1],
    }


#: What a demo workload prints on the real runtime: its units and its /dev, then it stays.
WORKLOAD_SCRIPT = (
    'echo "ACCELERATOR_UNITS=$ACCELERATOR_UNITS"; '
    "echo devices: $(cd /dev && ls -d * */* 2>/dev/null); sleep 3600"
)


def pod(claim_name: str, namespace: str, real: bool = False) -> dict[str, Any]:
    """The claim's pod; ``real``: a busybox container (testbed real runtime) that prints what it
    got (WORKLOAD_SCRIPT)."""
    container: dict[str, Any] = {
        "name": "app",
        "image": "registry.example/app:1",
        "resources": {"claims": [{"name": "acc"}]},
    }
    spec: dict[str, Any] = {
        "terminationGracePeriodSeconds": 0,
        "resourceClaims": [{"name": "acc", "resourceClaimName": claim_name}],
        "containers": [container],
    }
    if real:
        from kubeacc.testbed.images import WORKLOAD_IMAGE

        container["image"] = WORKLOAD_IMAGE
        container["imagePullPolicy"] = "Never"
        container["command"] = ["sh", "-c", WORKLOAD_SCRIPT]
        spec["automountServiceAccountToken"] = False
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": f"{claim_name}-pod", "namespace": namespace},
        "spec": spec,
    }
