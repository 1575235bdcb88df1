"""``kubeacc controller`` and ``kubeacc lifecycle-agent`` as processes against the testbed."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.coordination_v1 import Lease

from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import create_operation, delete_node_accelerators, wait_for
from tests.kubeaccproc import kubeacc_process


def test_commands_run_an_operation(
    testbed: Testbed, kubeacc_crds: None, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    root = build("edge-mixed", tmp_path / "host")
    (tmp_path / "lib").mkdir()
    node = "node-a"
    kc = str(testbed.kubeconfig)
    lease = f"kubeacc-cli-{uuid.uuid4().hex[:5]}"
    try:
        with (
            kubeacc_process(
                [
                    "controller",
                    "--kubeconfig",
                    kc,
                    "--lease-namespace",
                    "default",
                    "--identity",
                    lease,
                    "--interval",
                    "0.3",
                    "--admin-namespace",
                    namespace,
                ],
                tmp_path / "controller.log",
            ) as ctl,
            kubeacc_process(
                [
                    "lifecycle-agent",
                    "--node-name",
                    node,
                    "--host-root",
                    str(root),
                    "--kubeconfig",
                    kc,
                    "--bitstream-dir",
                    str(tmp_path / "lib"),
                    "--simulate-kernel",
                    "--interval",
                    "0.3",
                ],
                tmp_path / "agent.log",
            ) as agent,
        ):

            def accs() -> list[dict[str, Any]]:
                return [
                    as_dict(a)
                    for a in kube_client.list(Accelerator, labels={NODE_LABEL: node})
                    if (a.to_dict().get("status") or {}).get("device")
                ]

            def gpus() -> list[dict[str, Any]]:
                return [a for a in accs() if a["status"]["device"]["type"] == "gpu"]

            gpu = wait_for("a GPU Accelerator from the agent process", gpus, timeout=60)[0]
            create_operation(
                kube_client,
                namespace,
                "reset-gpu",
                {"action": "Reset", "targets": [gpu["metadata"]["name"]]},
            )

            def phase() -> str | None:
                op = as_dict(
                    kube_client.get(AcceleratorOperation, "reset-gpu", namespace=namespace)
                )
                p = (op.get("status") or {}).get("phase")
                return p if p in ("Succeeded", "Failed") else None

            assert wait_for("operation", phase, timeout=60) == "Succeeded"
            held = kube_client.get(Lease, "kubeacc-controller", namespace="default")
            assert held.spec and held.spec.holderIdentity == lease
            assert ctl.poll() is None and agent.poll() is None
    finally:
        delete_node_accelerators(kube_client, node)


pytestmark = pytest.mark.cluster
