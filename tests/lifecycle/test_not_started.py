"""A read the action needs first fails (here the agent's RBAC refuses the AcceleratorPolicy list,
as it did for a few seconds after API server restarts in the fault runner; a read timeout does
the same): nothing was done to the device, so the target stays Running and the next pass tries
again. Before, the agent logged the error and never came back to the target: the operation
stayed Running until the controller's timeout failed it (seen in the 30-minute fault run)."""

from __future__ import annotations

import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from lightkube.resources.rbac_authorization_v1 import ClusterRole

from kubeacc.controller.controller import Controller
from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict, install_crds
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel, actions
from kubeacc.synthetic.profiles import build
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import agent_cert_client, install_agent_access
from tests.crdfixtures import create_operation, operation_finished, running, wait_for

AGENT_ROLE = "kubeacc:agent"


@pytest.mark.cluster
def test_an_action_whose_first_reads_fail_is_tried_again_not_lost(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.WARNING, logger="kubeacc.lifecycle.agent")
    root = build("l4-pair", tmp_path / "host")
    with Testbed.start() as tb:
        node = tb.node_name
        client = tb.client(field_manager="kubeacc-test")
        install_crds(client)
        install_agent_access(client)
        agent = LifecycleAgent(
            agent_cert_client(tb, node, tmp_path),
            node_name=node,
            host=SyntheticHost(root, kernel=SyntheticKernel(root)),
            bitstream_dir=tmp_path,
            interval=0.3,
        )
        ctl = Controller(
            tb.client(field_manager="kubeacc-controller"),
            identity="not-started",
            lease_namespace="default",
            lease_name=f"kubeacc-not-started-{uuid.uuid4().hex[:5]}",
            interval=0.3,
            admin_namespaces=[ANY_NAMESPACE],
        )
        with running(agent, ctl):
            gpu = wait_for("a GPU's Accelerator", lambda: _a_gpu(client, node), 60)
            _refuse_policies(client)
            create_operation(client, "default", "reset", {"action": "Reset", "targets": [gpu]})
            wait_for(  # the old agent logged the error, the new one its retry
                "the agent's read refused",
                lambda: any("reset" in r.getMessage() for r in caplog.records),
                60,
            )
            op = as_dict(client.get(AcceleratorOperation, "reset", namespace="default"))
            assert op["status"]["phase"] == "Running", op["status"]
            assert actions(root) == []  # nothing done to the device
            install_agent_access(client)  # the role as deploy/ has it again
            done = wait_for(
                "operation finished", lambda: operation_finished(client, "default", "reset"), 60
            )
            assert done["status"]["phase"] == "Succeeded", done["status"]
            assert [a["action"] for a in actions(root)] == ["reset"]  # once
            assert any(
                "not started, again at the next pass" in r.getMessage() for r in caplog.records
            )


def _refuse_policies(client: Any) -> None:
    """The agents' role without AcceleratorPolicies (its other rules kept)."""
    role = as_dict(client.get(ClusterRole, AGENT_ROLE))
    rules = []
    for rule in role["rules"]:
        resources = [r for r in rule.get("resources", []) if r != "acceleratorpolicies"]
        if resources:
            rules.append({**rule, "resources": resources})
    client.patch(ClusterRole, AGENT_ROLE, {"rules": rules})


def _a_gpu(client: Any, node: str) -> str | None:
    for acc in client.list(Accelerator):
        name = str(acc.metadata.name)
        if name.startswith(f"{node}-gpu-"):
            return name
    return None
