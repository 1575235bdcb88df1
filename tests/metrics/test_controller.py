"""``kubeacc controller`` and ``kubeacc lifecycle-agent`` with ``--metrics-address`` on the testbed:
ready once their caches synced (and the Lease answers), operations by phase and duration and the
node's actions move as an operation runs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client

from kubeacc.crds.api import NODE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import create_operation, delete_node_accelerators, wait_for
from tests.kubeaccproc import kubeacc_process

from .scrape import get, value

pytestmark = pytest.mark.cluster


def test_not_ready_without_an_api_server(testbed: Testbed, tmp_path: Path) -> None:
    config = yaml.safe_load(testbed.kubeconfig.read_text())
    config["clusters"][0]["cluster"]["server"] = f"https://127.0.0.1:{free_port()}"
    dead = tmp_path / "dead.kubeconfig"
    dead.write_text(yaml.safe_dump(config))
    port = free_port()
    with kubeacc_process(
        [
            "controller",
            f"--kubeconfig={dead}",
            f"--metrics-address=127.0.0.1:{port}",
            "--lease-namespace=default",
        ],
        tmp_path / "controller.log",
    ):
        wait_for("the metrics port", lambda: get(port, "/healthz") == (200, "ok\n"), 60)
        code, body = get(port, "/readyz")
        assert code == 503
        assert "controller-watch-acceleratoroperations not synced" in body
        assert "leader election: the Lease could not be read or renewed" in body
        assert value(port, "kubeacc_controller_leader") == 0


def test_series_follow_an_operation(
    testbed: Testbed, kubeacc_crds: None, kube_client: Client, namespace: str, tmp_path: Path
) -> None:
    root = build("edge-mixed", tmp_path / "host")
    (tmp_path / "lib").mkdir()
    node = testbed.node_name
    kc = str(testbed.kubeconfig)
    port, lport = free_port(), free_port()
    try:
        with (
            kubeacc_process(
                [
                    "controller",
                    f"--kubeconfig={kc}",
                    "--lease-namespace=default",
                    f"--admin-namespace={namespace}",
                    "--interval=0.3",
                    f"--metrics-address=127.0.0.1:{port}",
                ],
                tmp_path / "controller.log",
            ),
            kubeacc_process(
                [
                    "lifecycle-agent",
                    f"--node-name={node}",
                    f"--host-root={root}",
                    f"--kubeconfig={kc}",
                    f"--bitstream-dir={tmp_path / 'lib'}",
                    "--simulate-kernel",
                    "--interval=0.3",
                    f"--metrics-address=127.0.0.1:{lport}",
                ],
                tmp_path / "agent.log",
            ),
        ):
            wait_for("controller ready", lambda: get(port, "/readyz") == (200, "ok\n"), 60)
            assert value(port, "kubeacc_controller_leader") == 1
            wait_for("agent ready", lambda: get(lport, "/readyz") == (200, "ok\n"), 60)
            assert value(port, "kubeacc_controller_operations_completed_total") == 0

            def gpus() -> list[dict[str, Any]]:
                return [
                    a
                    for a in map(as_dict, kube_client.list(Accelerator, labels={NODE_LABEL: node}))
                    if ((a.get("status") or {}).get("device") or {}).get("type") == "gpu"
                ]

            gpu = wait_for("a GPU Accelerator", gpus, timeout=60)[0]["metadata"]["name"]
            create_operation(kube_client, namespace, "reset", {"action": "Reset", "targets": [gpu]})
            create_operation(
                kube_client, namespace, "bad", {"action": "Reset", "targets": ["no-such-acc"]}
            )

            def done() -> bool:
                return all(
                    (as_dict(o).get("status") or {}).get("phase") in ("Succeeded", "Failed")
                    for o in kube_client.list(AcceleratorOperation, namespace=namespace)
                )

            wait_for("both operations finished", done, 60)
            ok = {"action": "Reset", "phase": "Succeeded"}
            failed = {"action": "Reset", "phase": "Failed"}
            assert value(port, "kubeacc_controller_operations_completed_total", **ok) == 1
            assert value(port, "kubeacc_controller_operations_completed_total", **failed) == 1
            assert value(port, "kubeacc_controller_operation_duration_seconds_count", **ok) == 1
            assert value(port, "kubeacc_controller_operation_duration_seconds_sum", **ok) > 0
            wait_for(
                "phases from the cache",
                lambda: (
                    value(port, "kubeacc_controller_operations", phase="Succeeded") >= 1
                    and value(port, "kubeacc_controller_operations", phase="Failed") >= 1
                ),
                10,
            )
            assert value(port, "kubeacc_controller_reconcile_passes_total") >= 1
            assert value(port, "kubeacc_controller_reconcile_errors_total") == 0
            # the node's side: one Reset ran there (the other operation was never dispatched)
            assert value(lport, "kubeacc_lifecycle_actions_total", result="Succeeded") == 1
            assert value(lport, "kubeacc_lifecycle_action_seconds_count", action="Reset") == 1
            assert value(lport, "kubeacc_lifecycle_actions_total", result="Failed") == 0
    finally:
        delete_node_accelerators(kube_client, node)
