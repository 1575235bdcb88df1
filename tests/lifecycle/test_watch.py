"""The life-cycle agent and the controller are driven by watches, not by a timer.

Both run with a resync period (300 s) far longer than any deadline here, so an operation that
finishes in time can only have been picked up through the watches. One test starts its own
testbed and stops its API server under the running agent and controller.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Namespace, Node

from kubeacc.controller.controller import Controller
from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict, install_crds
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from kubeacc.testbed import Testbed
from tests.crdfixtures import create_operation, running, wait_for

RESYNC = 300.0
GPU = "gpu-0000-01-00-0"  # on the edge-mixed host


@contextmanager
def stack(tb: Testbed, node: str, tmp: Path) -> Iterator[tuple[LifecycleAgent, Controller]]:
    root = build("edge-mixed", tmp / "host")
    (tmp / "lib").mkdir()
    agent = LifecycleAgent(
        tb.client(field_manager=f"kubeacc-agent-{node}"),
        node_name=node,
        host=SyntheticHost(root, kernel=SyntheticKernel(root)),
        bitstream_dir=tmp / "lib",
        interval=0.3,
        resync_seconds=RESYNC,
    )
    ctl = Controller(
        tb.client(field_manager="kubeacc-controller"),
        identity="watch-test",
        lease_namespace="default",
        lease_name=f"kubeacc-watch-{uuid.uuid4().hex[:5]}",
        resync_seconds=RESYNC,
        admin_namespaces=[ANY_NAMESPACE],
    )
    with running(agent, ctl, join=20) as threads:
        yield agent, ctl
    assert not any(t.is_alive() for t in threads), "agent or controller did not stop"


def _accelerator(client: Client, name: str) -> dict[str, Any] | None:
    try:
        acc = as_dict(client.get(Accelerator, name))
    except (ApiError, OSError):
        return None
    return acc if (acc.get("status") or {}).get("device") else None


def _reset(client: Client, ns: str, name: str, target: str) -> str:
    create_operation(client, ns, name, {"action": "Reset", "targets": [target]})

    def phase() -> str | None:
        op = as_dict(client.get(AcceleratorOperation, name, namespace=ns))
        p = (op.get("status") or {}).get("phase")
        return p if p in ("Succeeded", "Failed") else None

    result: str = wait_for(f"operation {name}", phase, timeout=60)
    return result


def test_operation_is_picked_up_through_the_watch(
    testbed: Testbed,
    kubeacc_crds: None,
    kubeacc_cleanup: None,
    kube_client: Client,
    namespace: str,
    tmp_path: Path,
) -> None:
    node = testbed.node_name  # a real Node: the controller keeps its Accelerators
    with stack(testbed, node, tmp_path) as (agent, ctl):
        target = f"{node}-{GPU}"
        wait_for("the agent's Accelerator", lambda: _accelerator(kube_client, target), 60)
        assert _reset(kube_client, namespace, "reset-w", target) == "Succeeded"
        # No relist happened: the operation came through the watch, not a resync.
        assert agent.operations.lists == 1
        assert ctl.operations.lists == 1
        assert ("/sys/bus/pci/devices/0000:01:00.0/reset", "1") in agent.host.kernel.writes  # type: ignore[attr-defined]


@pytest.mark.cluster
def test_agent_and_controller_ride_out_an_api_server_outage(tmp_path: Path) -> None:
    node = "node-w"
    with Testbed.start(with_kubelet=False) as tb:
        client = tb.client(field_manager="kubeacc-test")
        install_crds(client)
        client.create(Node(metadata=ObjectMeta(name=node)))
        client.create(Namespace(metadata=ObjectMeta(name="ops")))
        with stack(tb, node, tmp_path) as (agent, ctl):
            target = f"{node}-{GPU}"
            wait_for("the agent's Accelerator", lambda: _accelerator(client, target), 60)
            assert _reset(client, "ops", "before", target) == "Succeeded"

            tb.stop_apiserver()
            wait_for("watches broken", lambda: not agent.operations.synced.is_set(), 30)
            wait_for("controller watches broken", lambda: not ctl.operations.synced.is_set(), 30)
            tb.start_apiserver()

            # The watches come back by themselves (a fresh LIST each), long before a resync.
            wait_for("agent watch back", agent.operations.synced.is_set, 60)
            wait_for("controller watches back", ctl.operations.synced.is_set, 60)
            assert agent.operations.lists >= 2 and ctl.operations.lists >= 2
            assert _reset(client, "ops", "after", target) == "Succeeded"
