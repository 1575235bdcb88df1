"""End to end on the testbed: an AcceleratorOperation ``Program`` on a Cyborg device, carried out
by the life-cycle agent of a ``--inventory cyborg`` node through Glance and Cyborg.

The controller dispatches as for any node; the agent (node-a's identity, confined by
deploy/admission) publishes the Accelerators of the lane's PAC host (its compute host in Cyborg,
``--cyborg-compute-host``), and its Program goes to Cyborg's program API. The card is Cyborg's
Intel driver's, on a synthetic PAC (kubeacc.testbed.cyborgfpga).
"""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.types import PatchType

from kubeacc.controller.controller import Controller
from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.crds.api import API_VERSION, NODE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, AcceleratorPolicy, as_dict
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed.cyborgcloud import CyborgCloud
from kubeacc.testbed.cyborgfpga import FpgaHost
from kubeacc.testbed.identities import agent_cert_client, install_agent_access
from kubeacc.testbed.testbed import Testbed
from tests.conftest import CYBORG_FPGA_NODE
from tests.crdfixtures import create_operation, running, wait_for
from tests.lifecycle.cyborgparts import glance_images, operations, sha

pytestmark = [pytest.mark.cluster, pytest.mark.cyborg]

NODE = "node-a"
E2E_AFU = "e2e0000000000000000000000000a0f1"


@dataclass
class Stack:
    client: Client
    card: FpgaHost
    cloud: CyborgCloud
    library: Path
    sha: str
    accelerator: str


@pytest.fixture(scope="module")
def stack(
    testbed: Testbed,
    kubeacc_crds: None,
    cyborg_cloud: CyborgCloud,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("cyborg-lifecycle")
    card = cyborg_cloud.fpga[CYBORG_FPGA_NODE]
    library = base / "bitstreams"
    library.mkdir()
    (library / "e2e.gbs").write_bytes(make_gbs(E2E_AFU, card.interface_id(), b"\xe2" * 3000))
    digest = sha(library / "e2e.gbs")
    client = testbed.client(field_manager="kubeacc-test")
    policy = f"cyborg-e2e-{uuid.uuid4().hex[:5]}"
    client.patch(
        AcceleratorPolicy,
        policy,
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": policy},
            "spec": {
                "selector": {"types": ["fpga"]},
                "allowedBitstreams": [{"name": "e2e.gbs", "sha256": digest}],
            },
        },
        patch_type=PatchType.APPLY,
        force=True,
    )
    install_agent_access(client)
    ops = operations(cyborg_cloud, library)
    (device,) = ops.discover()
    agent = LifecycleAgent(
        agent_cert_client(testbed, NODE, base),
        node_name=NODE,
        host=SyntheticHost(card.root),
        bitstream_dir=library,
        interval=0.5,
        cyborg=ops,
    )
    ctl = Controller(
        testbed.client(field_manager="kubeacc-controller"),
        identity="cyborg-e2e",
        lease_namespace="default",
        lease_name=f"kubeacc-cyborg-e2e-{uuid.uuid4().hex[:5]}",
        interval=0.3,
        admin_namespaces=[ANY_NAMESPACE],
    )
    with running(agent, ctl):
        yield Stack(client, card, cyborg_cloud, library, digest, f"{NODE}-{device}")
    with contextlib.suppress(ApiError):
        client.delete(AcceleratorPolicy, policy)
    for acc in client.list(Accelerator, labels={NODE_LABEL: NODE}):
        with contextlib.suppress(ApiError):
            client.delete(Accelerator, acc.metadata.name if acc.metadata else "")


def _acc(client: Client, name: str) -> dict[str, Any] | None:
    try:
        obj = as_dict(client.get(Accelerator, name))
    except ApiError:
        return None
    return obj if (obj.get("status") or {}).get("device") else None


def _run_op(stack: Stack, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    create_operation(stack.client, ns, name, spec)

    def finished() -> dict[str, Any] | None:
        obj = as_dict(stack.client.get(AcceleratorOperation, name, namespace=ns))
        phase = (obj.get("status") or {}).get("phase")
        return obj if phase in ("Succeeded", "Failed") else None

    # Cyborg's agent reports the new AFU at its next report, at most a minute later
    result: dict[str, Any] = wait_for(f"operation {name}", finished, timeout=150)
    return result


def test_a_cyborg_deployable_is_an_accelerator(stack: Stack) -> None:
    acc = wait_for("the PAC's Accelerator", lambda: _acc(stack.client, stack.accelerator))
    dev = acc["status"]["device"]
    assert dev["type"] == "fpga" and dev["source"] == "cyborg"
    assert dev["attributes"]["cyborgDeployable"]


def test_program_through_cyborg_succeeds_and_the_card_runs_the_afu(
    stack: Stack, namespace: str
) -> None:
    wait_for("the PAC's Accelerator", lambda: _acc(stack.client, stack.accelerator))
    op = _run_op(
        stack,
        namespace,
        "program-via-cyborg",
        {
            "action": "Program",
            "targets": [stack.accelerator],
            "program": {"bitstream": "e2e.gbs", "sha256": stack.sha},
        },
    )
    assert op["status"]["phase"] == "Succeeded", op["status"]
    (result,) = op["status"]["results"]
    assert result["reason"] == "Programmed" and result["afuId"] == E2E_AFU, result
    assert stack.card.afu_id() == E2E_AFU

    def shown() -> bool:
        acc = _acc(stack.client, stack.accelerator) or {}
        return bool(acc["status"]["device"]["fpga"]["afuId"] == E2E_AFU)

    wait_for("the new AFU in the Accelerator's status", shown)
    assert any(i["kubeacc_sha256"] == stack.sha for i in glance_images(stack.cloud))


@pytest.mark.parametrize(
    ("spec", "reason", "agent"),
    [
        # a digest no policy allows: the controller refuses it before it dispatches
        ({"bitstream": "e2e.gbs", "sha256": "e" * 64}, "BitstreamNotAllowed", False),
        # an allowed digest, but no such file in the node's library: the agent refuses it
        ({"bitstream": "missing.gbs", "sha256": ""}, "BitstreamNotFound", True),
        # an action on the functions, which are Cyborg's: none in kube-acc's model
        (None, "NotAPCIDevice", False),
    ],
)
def test_refused_operations_fail_and_touch_nothing(
    stack: Stack, namespace: str, spec: dict[str, str] | None, reason: str, agent: bool
) -> None:
    wait_for("the PAC's Accelerator", lambda: _acc(stack.client, stack.accelerator))
    before = (stack.card.fpgaconf_runs(), stack.card.afu_id(), glance_images(stack.cloud))
    if spec is None:
        body: dict[str, Any] = {"action": "Reset", "targets": [stack.accelerator]}
    else:
        program = {**spec, "sha256": spec["sha256"] or stack.sha}
        body = {"action": "Program", "targets": [stack.accelerator], "program": program}
    op = _run_op(stack, namespace, f"refused-{reason.lower()}", body)
    assert op["status"]["phase"] == "Failed", op["status"]
    failed = next(c for c in op["status"]["conditions"] if c["type"] == "Failed")
    assert failed["reason"] == reason, failed
    if agent:
        assert op["status"]["results"][0]["phase"] == "Failed"
    after = (stack.card.fpgaconf_runs(), stack.card.afu_id(), glance_images(stack.cloud))
    assert after == before
