"""examples/ applied as written to the chart installed on a node that runs real containers.

One node on containerd + runc with the synthetic ``dgx-h100`` host (8 H100, 8 ConnectX-7 with
VFs; no FPGA, no XPU), kube-acc installed by ``helm install`` from its image, the controller
with the chart's rule (only the release namespace operates on any device). The examples'
``busybox:1.36`` is imported into containerd under that name (the node has no registry), as a
node that pulled it would have it. What each header promises for a cluster of this shape:
the GPU Reset succeeds, the FPGA Program and XPU Drain end ``Failed`` with ``NoTargetMatched``,
the GPU, H100, GPU+NIC and VF pods run in real containers and print their units, and the
claims for devices the node lacks (an N3000, an XPU) stay Pending.
"""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod
from lightkube.resources.resource_v1 import ResourceClaim

from kubeacc.crds.resources import AcceleratorOperation, as_dict
from kubeacc.testbed import Testbed, withkubeacc
from tests.testbed.helpers import eventually

from .conftest import REAL_NODE, Helm

pytestmark = pytest.mark.cluster

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
NS = "kubeacc-system"
NODE = REAL_NODE
RUNS = ["any-gpu", "h100", "gpu-nic-same-root", "sriov-vf"]
PENDING = ["h200-else-xpu", "fpga-crypto", "xpu-from-template"]


def _kubectl(tb: Testbed, *args: str) -> str:
    out = subprocess.run([*tb.kubectl(), *args], capture_output=True, text=True, check=False)
    assert out.returncode == 0, out.stderr
    return out.stdout


def _op(client: Client, name: str) -> dict[str, Any] | None:
    op = as_dict(client.get(AcceleratorOperation, name, namespace="ml-team"))
    return op if (op.get("status") or {}).get("phase") in ("Succeeded", "Failed") else None


def _phases(client: Client) -> dict[str, str]:
    return {
        p.metadata.name: p.status.phase
        for p in client.list(Pod, namespace="ml-team")
        if p.metadata and p.metadata.name and p.status and p.status.phase
    }


def test_examples_as_written_on_the_chart_install(
    real_cluster: tuple[Testbed, Helm], tmp_path: Path
) -> None:
    tb, _ = real_cluster
    client = tb.client()
    # the fixture imported the images (busybox:1.36 under the examples' name); dgx-h100 host
    withkubeacc.install(tb, tmp_path, nvml=False, images=False)

    # The commands of examples/README.md, with waits of the test's own between them.
    _kubectl(tb, "apply", "-f", str(EXAMPLES / "namespace.yaml"))
    tb.wait_service_account("ml-team")
    _kubectl(tb, "apply", "-f", str(EXAMPLES / "policies"))
    eventually(
        lambda: "ml-team-operations.policy.kubeacc.io" in _kubectl(tb, "get", "deviceclasses"),
        60,
        "the grant policy's DeviceClass",
    )
    _kubectl(tb, "apply", "-f", str(EXAMPLES / "operations"))
    done = {
        name: eventually(lambda n=name: _op(client, n), 120, f"operation {name}")
        for name in ("reset-gpu", "program-gzip", "drain-xpu")
    }
    reset = done["reset-gpu"]["status"]
    assert reset["phase"] == "Succeeded", reset
    (target,) = reset["targets"]
    assert target.startswith(f"{NODE}-gpu-")
    assert [r["reason"] for r in reset["results"]] == ["Reset"]
    for name in ("program-gzip", "drain-xpu"):
        status = done[name]["status"]
        reasons = [c.get("reason") for c in status.get("conditions") or []]
        assert status["phase"] == "Failed" and "NoTargetMatched" in reasons, status

    _kubectl(tb, "apply", "-f", str(EXAMPLES / "claims"))
    eventually(
        lambda: all(_phases(client).get(p) == "Running" for p in RUNS), 180, f"{RUNS} Running"
    )
    for pod in RUNS:
        claim = client.get(ResourceClaim, pod, namespace="ml-team")  # each named as its pod
        alloc = claim.status.allocation if claim.status else None
        assert alloc is not None, pod
        log = eventually(
            lambda p=pod: tb.kubelet.container_log("ml-team", p, "app"), 60, f"{pod}'s output"
        )
        units = log.splitlines()[0].removeprefix("ACCELERATOR_UNITS=").split(",")
        assert len(units) == len(alloc.devices.results), (pod, log)
        assert all(u.startswith("0000:") for u in units), (pod, log)
    # what this node lacks stays Pending, its claims unallocated
    phases = _phases(client)
    assert all(phases.get(p) == "Pending" for p in PENDING), phases
    unallocated = {
        c.metadata.name.split("-acc-")[0]
        for c in client.list(ResourceClaim, namespace="ml-team")
        if c.metadata and c.metadata.name and not (c.status and c.status.allocation)
    }
    assert unallocated == set(PENDING), unallocated
