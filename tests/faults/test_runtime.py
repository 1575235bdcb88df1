"""The containerd nodes' check (tests/faults/runtime.py) on planted container logs: a report
that matches its claim passes, and one without the claim, a device, a spec variable or a
device node fails, as does an older container's report or none at all."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from kubeacc.node import cdi
from tests.faults import runtime
from tests.faults.invariants import ClusterView, Tracker

NODE = "node-a"
CID = "c0ffee"
DEVICE = "gpu-0000-1b-00-0"


class FakeKubelet:
    def __init__(self, root: Path) -> None:
        self.root_dir = root


class FakeTestbed:
    def __init__(self, root: Path) -> None:
        self.kubelet = FakeKubelet(root)

    def node(self, name: str) -> FakeKubelet:
        assert name == NODE
        return self.kubelet


def _report(cid: str, env: dict[str, str], devs: list[str]) -> str:
    lines = ["BEGIN", f"ID {cid}", *(f"ENV {k}={v}" for k, v in env.items())]
    lines += [f"DEV {d}" for d in devs] + ["END"]
    # CRI log lines; the first one split in two partial lines
    out = ["2026-12-06T12:00:00Z stdout P BEG", "2026-12-06T12:00:00Z stdout F IN"]
    return "\n".join(out + [f"2026-12-06T12:00:00Z stdout F {ln}" for ln in lines[1:]]) + "\n"


def _view(tmp_path: Path, log: str, restarts: int = 0) -> ClusterView:
    logs = tmp_path / "kubelet" / "pod-logs" / "ns_p_uid" / runtime.CONTAINER
    logs.mkdir(parents=True)
    (logs / f"{restarts}.log").write_text(log)
    claim = {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "acc", "driver": "kubeacc.io", "pool": NODE, "device": DEVICE}
                    ]
                }
            }
        },
    }
    pod = {
        "metadata": {"name": "p", "namespace": "ns", "uid": "pu"},
        "spec": {"nodeName": NODE, "resourceClaims": [{"name": "acc", "resourceClaimName": "c"}]},
        "status": {
            "phase": "Running",
            "containerStatuses": [
                {
                    "name": runtime.CONTAINER,
                    "containerID": f"containerd://{CID}",
                    "restartCount": restarts,
                    "state": {"running": {}},
                }
            ],
        },
    }
    return ClusterView([claim], [pod], {}, 0.0)


SPEC_ENV = {"KUBEACC_CLAIM": "ns/c", "NVIDIA_VISIBLE_DEVICES": "GPU-1"}
GOOD_ENV = {**SPEC_ENV, "KUBEACC_DEVICE_GPU_0000_1B_00_0": "0000:1b:00.0"}


def _check(tmp_path: Path, log: str) -> list[str]:
    cdi_dir = tmp_path / "cdi"
    cdi_dir.mkdir()
    spec: dict[str, Any] = {
        "containerEdits": {"env": ["KUBEACC_CLAIM=ns/c"]},
        "devices": [
            {
                "name": "d",
                "containerEdits": {
                    "env": ["NVIDIA_VISIBLE_DEVICES=GPU-1"],
                    "deviceNodes": [{"path": "/dev/nvidia0"}],
                },
            }
        ],
    }
    cdi.spec_path(cdi_dir, "u1").write_text(json.dumps(spec))
    verified: set[str] = set()
    view = _view(tmp_path, log)
    tb: Any = FakeTestbed(tmp_path / "kubelet")
    tracker = Tracker()
    args = (tb, view, tracker, {NODE: cdi_dir})
    assert runtime.container_violations(*args, grace=0, verified=verified) == []  # grace
    view.at += 1
    found = runtime.container_violations(*args, grace=0, verified=verified)
    assert bool(found) != bool(verified), (found, verified)
    return [v.detail for v in found]


def test_a_report_that_matches_its_claim_passes(tmp_path: Path) -> None:
    assert _check(tmp_path, _report(CID, GOOD_ENV, ["/dev/null", "/dev/nvidia0"])) == []


@pytest.mark.parametrize(
    ("log", "problem"),
    [
        (
            _report(CID, {**GOOD_ENV, "KUBEACC_CLAIM": "ns/other"}, ["/dev/nvidia0"]),
            "KUBEACC_CLAIM",
        ),
        (
            _report(CID, {k: v for k, v in GOOD_ENV.items() if "1B" not in k}, ["/dev/nvidia0"]),
            f"no KUBEACC_DEVICE_GPU_0000_1B_00_0 for device {DEVICE}",
        ),
        (_report(CID, {**GOOD_ENV, "NVIDIA_VISIBLE_DEVICES": "GPU-2"}, ["/dev/nvidia0"]), "GPU-2"),
        (_report(CID, GOOD_ENV, ["/dev/null"]), "no character device /dev/nvidia0"),
        (_report("older", GOOD_ENV, ["/dev/nvidia0"]), "has not reported"),
        ("", "has not reported"),
    ],
)
def test_a_report_short_of_its_claim_fails(tmp_path: Path, log: str, problem: str) -> None:
    found = _check(tmp_path, log)
    assert len(found) == 1 and problem in found[0], found
