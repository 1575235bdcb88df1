"""A malformed AcceleratorOperation that an old CRD lets in is refused by the life-cycle agent,
with the field named in its result and a Warning Event, and the others still run.

The test starts its own testbed and installs the AcceleratorOperation CRD with a ``spec`` that
takes anything (a CRD from before the schema), then plays the controller: it dispatches each
operation to the agent through the status subresource, as a controller (or a hand edit) would.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Event
from lightkube.types import PatchType

from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, as_dict
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from tests.crdfixtures import create_operation_eventually, permissive_operations, running, wait_for

NODE = "node-m"
GPU = "gpu-0000-01-00-0"  # on the edge-mixed host
TARGET = f"{NODE}-{GPU}"
NS = "ops"

#: Operation name -> (spec, what the agent reports: reason and a part of the message).
CASES: dict[str, tuple[Any, tuple[str, str]]] = {
    "unknown-action": (
        {"action": "Explode", "targets": [TARGET]},
        ("InvalidSpec", "spec.action: Invalid enum value 'Explode'"),
    ),
    "wrong-type": (
        {"action": "Power", "targets": [TARGET], "power": {"state": 1}},
        ("InvalidSpec", "spec.power.state: Expected `str`, got `int`"),
    ),
    "missing-action": (
        {"targets": [TARGET], "extra": {"x": 1}},
        ("InvalidSpec", "spec: Object missing required field `action`"),
    ),
    "missing-section": (
        {"action": "Power", "targets": [TARGET]},
        ("InvalidSpec", "spec.power is required for action Power"),
    ),
    "good": ({"action": "Reset", "targets": [TARGET], "unknown": "ignored"}, ("Reset", "reset")),
}


def _dispatch(client: Client, name: str) -> None:
    client.patch(
        AcceleratorOperation.Status,
        name,
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": name, "namespace": NS},
            "status": {
                "phase": "Running",
                "dispatch": [{"accelerator": TARGET, "node": NODE, "deviceName": GPU}],
            },
        },
        namespace=NS,
        patch_type=PatchType.APPLY,
        field_manager="kubeacc-controller",
        force=True,
    )


def _result(client: Client, name: str) -> dict[str, Any] | None:
    op = as_dict(client.get(AcceleratorOperation, name, namespace=NS))
    for res in (op.get("status") or {}).get("results") or []:
        if res.get("phase") in ("Succeeded", "Failed"):
            return dict(res)
    return None


def _accelerator(client: Client) -> bool:
    try:
        return bool(as_dict(client.get(Accelerator, TARGET)).get("status"))
    except ApiError:
        return False


@pytest.mark.cluster
def test_malformed_operations_are_refused_and_the_others_run(tmp_path: Path) -> None:
    root = build("edge-mixed", tmp_path / "host")
    (tmp_path / "lib").mkdir()
    kernel = SyntheticKernel(root)
    with permissive_operations(NS) as (tb, client):
        agent = LifecycleAgent(
            tb.client(field_manager=f"kubeacc-agent-{NODE}"),
            node_name=NODE,
            host=SyntheticHost(root, kernel=kernel),
            bitstream_dir=tmp_path / "lib",
            interval=0.3,
        )
        with running(agent):
            wait_for("the agent's Accelerator", lambda: _accelerator(client), 60)
            for name, (spec, _) in CASES.items():
                create_operation_eventually(client, NS, name, spec)
                _dispatch(client, name)
            got = {
                name: wait_for(f"result of {name}", partial(_result, client, name), 60)
                for name in CASES
            }
            events = [as_dict(e) for e in client.list(Event, namespace=NS)]
    for name, (_, (reason, message)) in CASES.items():
        res = got[name]
        assert res["phase"] == ("Succeeded" if name == "good" else "Failed"), (name, res)
        assert res["reason"] == reason and message in res["message"], (name, res)
        assert any(
            e["involvedObject"]["name"] == name
            and e["reason"] == reason
            and e["type"] == ("Normal" if name == "good" else "Warning")
            for e in events
        ), (name, events)
    # Only the good operation touched the host.
    assert kernel.writes == [("/sys/bus/pci/devices/0000:01:00.0/reset", "1")]
