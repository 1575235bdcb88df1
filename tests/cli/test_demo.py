"""``kubeacc demo`` as a user runs it: its own four-node cluster, kube-acc installed on it, every
pod Running, the FPGA programmed, the inventory with its users, a refused and a drained Reset."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from kubeacc.cli.demo_claims import BITSTREAM, CLAIMS, POLICIES
from kubeacc.testbed.shapes import MULTINODE_SHAPES

pytestmark = pytest.mark.cluster


@pytest.fixture(scope="module")
def demo_output(tmp_path_factory: pytest.TempPathFactory) -> str:
    exe = Path(sys.executable).parent / "kubeacc"
    out = subprocess.run(
        [str(exe), "demo", "--workdir", str(tmp_path_factory.mktemp("demo")), "--timeout", "120"],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert "demo finished" in out.stdout, out.stdout[-3000:] + out.stderr[-3000:]
    return out.stdout + f"\nexit status {out.returncode}\n"


def test_demo_finds_no_problem(demo_output: str) -> None:
    # the demo checks itself: every pod Running, FPGA programmed, busy Reset refused, ...
    assert "demo problems" not in demo_output, demo_output[-1500:]
    assert demo_output.endswith("\nexit status 0\n")
    # written to a pipe: plain columns, no box drawing, no colour (docs/cli.md, "Tables")
    assert not re.search("[\u2500-\u257f]", demo_output) and "\x1b[" not in demo_output


def test_every_pod_runs_on_a_node_with_a_kubelet(demo_output: str) -> None:
    assert f"{len(CLAIMS)}/{len(CLAIMS)} pods Running" in demo_output
    assert "not allocated" not in demo_output
    for name in CLAIMS:
        assert name in demo_output
    # the claims table: every pod Running with the CDI devices and units our agents handed over
    assert len(re.findall(r"   Running(?:;|$)", demo_output, re.M)) == len(CLAIMS)
    assert demo_output.count("ACCELERATOR_UNITS=0000:") >= len(CLAIMS)
    # pods landed on the different shapes of node, including the KunLun XPU and the FPGA node
    for node in ("gpu-server", "kunlun-node", "fpga-node", "edge-node"):
        assert re.search(rf"   {node}   ", demo_output), node


def test_policies_generate_classes_and_the_fpga_is_programmed(demo_output: str) -> None:
    for name in POLICIES:
        assert f"DeviceClass {name}.policy.kubeacc.io" in demo_output
    assert f"{BITSTREAM.name} programmed for claim fpga-bitstream" in demo_output
    assert f"AFU {BITSTREAM.afu_id}" in demo_output


def _inventory(output: str) -> dict[str, list[str]]:
    """The rows of the printed ``kubectl get accelerators`` table by accelerator name."""
    lines = output.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("NAME ") and "USERS" in line)
    header = lines[start]
    cols = [m.start() for m in re.finditer(r"\S+", header)]
    rows = {}
    for line in lines[start + 1 :]:
        if not line or line[0].isspace() or not re.match(r"^[a-z0-9-]+\s", line):
            break
        cells = [line[a:b].strip() for a, b in zip(cols, [*cols[1:], len(line) + 1], strict=True)]
        rows[cells[0]] = cells
    return rows


def test_inventory_shows_model_node_health_and_users(demo_output: str) -> None:
    rows = _inventory(demo_output)
    assert {r[1] for r in rows.values()} == {s.name for s in MULTINODE_SHAPES}
    h100s = [r for r in rows.values() if r[3] == "NVIDIA H100 80GB HBM3"]
    assert len(h100s) == 8 and all(r[1] == "gpu-server" and r[4] == "Healthy" for r in h100s)
    # users: the claims (and pods) that hold the devices, as the node agents recorded them
    users = {name: row[-1] for name, row in rows.items()}
    assert "fpga-bitstream" in users["fpga-node-fpga-0000-af-00-0"]
    assert sum(1 for u in users.values() if "gpus-nic-same-root" in u) == 3
    assert any("h200-or-xpu" in u for n, u in users.items() if n.startswith("kunlun-node-xpu"))
    assert users["fpga-node-fpga-0000-3b-00-0"] == "<none>"


def test_reset_of_a_busy_gpu_is_refused_then_runs_after_the_drain(demo_output: str) -> None:
    refused = re.search(r"Reset (\S+) \(reset-busy-gpu\): (\w+) (.*)", demo_output)
    assert refused, demo_output[-2000:]
    gpu, phase, message = refused.groups()
    assert gpu.startswith("gpu-server-gpu-")
    assert phase == "Failed", message
    assert "h100" in message
    users = message.split(" is used by ", 1)[1].split(" (", 1)[0].split(", ")
    assert len(users) == len(set(users)), f"a user named twice: {message}"
    drained = re.findall(r"Reset drainFirst \S+ \(reset-after-drain\): (\w+) (.*)", demo_output)
    assert len(drained) == 2, drained
    (waiting, why), (done, _) = drained
    # first it waits for the pod's claim to go (Draining), then, the pod deleted, it runs
    assert waiting in ("Pending", "Running") and "h100" in why, drained
    assert done == "Succeeded", drained
    assert "deleting pod h100-pod" in demo_output
