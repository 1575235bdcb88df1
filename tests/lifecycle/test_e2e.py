"""End to end on the testbed: controller + life-cycle agent of node-a on a synthetic FPGA host.

The agent authenticates as node-a's agent (certificate in group kubeacc:agents) with the
admission policy of deploy/admission installed, so every write it makes passes the policy.

The agent runs in-process with the synthetic kernel (``kubeacc.synthetic.kernel``), which makes
sysfs writes and the FPGA PR ioctl have the effects a real kernel has on the synthetic tree.
"""

from __future__ import annotations

import contextlib
import hashlib
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
from kubeacc.crds.api import API_VERSION, MODEL_LABEL, NODE_LABEL, TYPE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, AcceleratorPolicy, as_dict
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.node.nodelabels import label_value
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.profiles import build
from kubeacc.testbed.identities import agent_cert_client, install_agent_access
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import create_operation, running, wait_for, wait_until_no_claim_holds

NODE = "node-a"
CARD0 = f"{NODE}-fpga-0000-3b-00-0"  # PAC N3000, AFU loaded
CARD1 = f"{NODE}-fpga-0000-af-00-0"  # PAC Arria 10, empty
IFACE1 = "9926ab6d6c925a68aabca7d84c545738"
NEW_AFU = "c000c9660d824272a95dd4c5d2f3b4a1"


@dataclass
class Stack:
    root: Path
    library: Path
    kernel: SyntheticKernel
    agent: LifecycleAgent
    policy: str
    good_sha: str
    client: Client


@pytest.fixture(scope="module")
def stack(
    testbed: Testbed, kubeacc_crds: None, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[Stack]:
    base = tmp_path_factory.mktemp("lifecycle")
    root = build("intel-fpga-dfl", base / "host")
    library = base / "bitstreams"
    (library / "nlb").mkdir(parents=True)
    good = make_gbs(NEW_AFU, IFACE1, b"\x00partial-bitstream" * 64, name="nlb0")
    (library / "nlb" / "nlb0.gbs").write_bytes(good)
    wrong_fim = make_gbs(NEW_AFU, "0" * 31 + "1", b"other" * 64)
    (library / "wrong-fim.gbs").write_bytes(wrong_fim)
    outside = base / "secret.gbs"
    outside.write_bytes(good + b"x")
    (library / "escape.gbs").symlink_to(outside)
    client = testbed.client(field_manager="kubeacc-test")
    policy = f"fpga-e2e-{uuid.uuid4().hex[:5]}"
    digests = [hashlib.sha256(b).hexdigest() for b in (good, wrong_fim, good + b"x")]
    client.patch(
        AcceleratorPolicy,
        policy,
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": policy},
            "spec": {
                "selector": {"types": ["fpga"]},
                "allowedBitstreams": [
                    {"name": n, "sha256": d}
                    for n, d in zip(
                        ("nlb/nlb0.gbs", "wrong-fim.gbs", "escape.gbs"), digests, strict=True
                    )
                ],
            },
        },
        patch_type=PatchType.APPLY,
        force=True,
    )
    kernel = SyntheticKernel(root)
    # The agent writes as a deployed one would: its node's identity, confined by deploy/admission.
    install_agent_access(client)
    agent = LifecycleAgent(
        agent_cert_client(testbed, NODE, base),
        node_name=NODE,
        host=SyntheticHost(root, kernel=kernel),
        bitstream_dir=library,
        interval=0.3,
    )
    ctl = Controller(
        testbed.client(field_manager="kubeacc-controller"),
        identity="e2e",
        lease_namespace="default",
        lease_name=f"kubeacc-e2e-{uuid.uuid4().hex[:5]}",
        interval=0.3,
        admin_namespaces=[ANY_NAMESPACE],
    )
    wait_until_no_claim_holds(client, NODE)
    with running(agent, ctl):
        yield Stack(root, library, kernel, agent, policy, digests[0], client)
    with contextlib.suppress(ApiError):
        client.delete(AcceleratorPolicy, policy)
    for acc in client.list(Accelerator, labels={NODE_LABEL: NODE}):
        with contextlib.suppress(ApiError):
            client.delete(Accelerator, acc.metadata.name if acc.metadata else "")


def _acc(client: Client, name: str) -> dict[str, Any] | None:
    try:
        return as_dict(client.get(Accelerator, name))
    except ApiError:
        return None


def _run_op(stack: Stack, ns: str, name: str, spec: dict[str, Any]) -> dict[str, Any]:
    create_operation(stack.client, ns, name, spec)

    def finished() -> dict[str, Any] | None:
        obj = as_dict(stack.client.get(AcceleratorOperation, name, namespace=ns))
        phase = (obj.get("status") or {}).get("phase")
        return obj if phase in ("Succeeded", "Failed") else None

    result: dict[str, Any] = wait_for(f"operation {name}", finished, timeout=40)
    return result


def _afu(stack: Stack, name: str) -> str | None:
    acc = _acc(stack.client, name) or {}
    fpga = ((acc.get("status") or {}).get("device") or {}).get("fpga") or {}
    return fpga.get("afuId")


def test_agent_populates_accelerators(stack: Stack) -> None:
    acc = wait_for("Accelerators of node-a", lambda: _acc(stack.client, CARD0), timeout=30)
    acc = wait_for(
        "status", lambda: (a := _acc(stack.client, CARD0)) and a.get("status") and a, timeout=30
    )
    assert acc["spec"] == {"node": NODE, "deviceName": "fpga-0000-3b-00-0", "cordoned": False}
    assert acc["metadata"]["labels"][NODE_LABEL] == NODE
    assert acc["metadata"]["labels"][TYPE_LABEL] == "fpga"
    assert acc["metadata"]["labels"][MODEL_LABEL] == label_value(acc["status"]["device"]["model"])
    dev = acc["status"]["device"]
    assert dev["type"] == "fpga" and dev["vendor"] == "Intel"
    assert dev["pciBusID"] == "0000:3b:00.0" and dev["numaNode"] == 0
    assert dev["fpga"]["afuId"] == "d8424dc4a4a3c413f89e433683f9040b"
    assert acc["status"]["hostDriver"] == "dfl-pci"
    present = next(c for c in acc["status"]["conditions"] if c["type"] == "Present")
    assert present["status"] == "True"
    assert wait_for("card 1", lambda: _acc(stack.client, CARD1))


def test_program_reaches_succeeded_and_new_afu_shows(stack: Stack, namespace: str) -> None:
    wait_for("card 1", lambda: _acc(stack.client, CARD1), timeout=30)
    op = _run_op(
        stack,
        namespace,
        "program-nlb0",
        {
            "action": "Program",
            "targets": [CARD1],
            "program": {"bitstream": "nlb/nlb0.gbs", "sha256": stack.good_sha},
        },
    )
    assert op["status"]["phase"] == "Succeeded", op["status"]
    (result,) = op["status"]["results"]
    assert result["afuId"] == NEW_AFU and result["node"] == NODE
    wait_for("new AFU in Accelerator status", lambda: _afu(stack, CARD1) == NEW_AFU)
    assert any(p.startswith("/dev/dfl-fme.1") for p, _ in stack.kernel.writes)


def test_bad_bitstreams_fail_cleanly(stack: Stack, namespace: str) -> None:
    wait_for("card 0", lambda: _afu(stack, CARD0), timeout=30)
    before = _afu(stack, CARD0)
    cases = {
        "digest": ({"bitstream": "nlb/nlb0.gbs", "sha256": "e" * 64}, None),
        "escape": (
            {
                "bitstream": "escape.gbs",
                "sha256": hashlib.sha256((stack.library / "escape.gbs").read_bytes()).hexdigest(),
            },
            "InvalidBitstreamName",
        ),
        "wrong-fim": (
            {
                "bitstream": "wrong-fim.gbs",
                "sha256": hashlib.sha256(
                    (stack.library / "wrong-fim.gbs").read_bytes()
                ).hexdigest(),
            },
            "IncompatibleBitstream",
        ),
        "missing": ({"bitstream": "nope.gbs", "sha256": stack.good_sha}, "BitstreamNotFound"),
    }
    for name, (program, reason) in cases.items():
        op = _run_op(
            stack,
            namespace,
            f"bad-{name}",
            {"action": "Program", "targets": [CARD0], "program": program},
        )
        assert op["status"]["phase"] == "Failed", (name, op["status"])
        failed = next(c for c in op["status"]["conditions"] if c["type"] == "Failed")
        if reason is None:  # digest not in the policy: refused by the controller
            assert failed["reason"] == "BitstreamNotAllowed"
        else:
            assert failed["reason"] == reason, failed
            assert op["status"]["results"][0]["phase"] == "Failed"
        assert failed["message"]
    assert _afu(stack, CARD0) == before


def test_attach_to_vfio_and_detach_back(stack: Stack, namespace: str) -> None:
    wait_for("card 0", lambda: _acc(stack.client, CARD0), timeout=30)
    op = _run_op(stack, namespace, "attach", {"action": "Attach", "targets": [CARD0]})
    assert op["status"]["phase"] == "Succeeded", op["status"]
    dev = stack.root / "sys/bus/pci/devices/0000:3b:00.0"
    assert (dev / "driver").resolve().name == "vfio-pci"
    assert (dev / "driver_override").read_text().strip() == "vfio-pci"

    def driver() -> str | None:
        acc = _acc(stack.client, CARD0) or {}
        return ((acc.get("status") or {}).get("device") or {}).get("pci", {}).get("driver")

    wait_for("vfio-pci in status", lambda: driver() == "vfio-pci")
    assert (_acc(stack.client, CARD0) or {})["status"]["hostDriver"] == "dfl-pci"

    op = _run_op(stack, namespace, "detach", {"action": "Detach", "targets": [CARD0]})
    assert op["status"]["phase"] == "Succeeded", op["status"]
    assert (dev / "driver").resolve().name == "dfl-pci"
    assert (dev / "driver_override").read_text().strip() == "(null)"
    wait_for("dfl-pci in status", lambda: driver() == "dfl-pci")


def test_reset_runs_on_the_node(stack: Stack, namespace: str) -> None:
    wait_for("card 1", lambda: _acc(stack.client, CARD1), timeout=30)
    op = _run_op(stack, namespace, "reset", {"action": "Reset", "targets": [CARD1]})
    assert op["status"]["phase"] == "Succeeded", op["status"]
    assert ("/sys/bus/pci/devices/0000:af:00.0/reset", "1") in stack.kernel.writes


def test_drain_first_waits_then_runs_and_uncordons(stack: Stack, namespace: str) -> None:
    """The allocator's ``allocatedTo`` and the agent's status fields live side by side
    (server-side apply, separate field managers); drainFirst waits for the consumer to go."""
    wait_for("card 1", lambda: _acc(stack.client, CARD1), timeout=30)

    def allocate(consumers: list[dict[str, str]]) -> None:
        stack.client.patch(
            Accelerator.Status,
            CARD1,
            {
                "apiVersion": API_VERSION,
                "kind": "Accelerator",
                "metadata": {"name": CARD1},
                "status": {"allocatedTo": consumers},
            },
            patch_type=PatchType.APPLY,
            field_manager="kubeacc-dra-test",
            force=True,
        )

    allocate([{"kind": "ResourceClaim", "namespace": namespace, "name": "c0"}])
    create_operation(
        stack.client,
        namespace,
        "reset-drain",
        {"action": "Reset", "targets": [CARD1], "drainFirst": True},
    )

    def status() -> dict[str, Any]:
        op = as_dict(stack.client.get(AcceleratorOperation, "reset-drain", namespace=namespace))
        return op.get("status") or {}

    wait_for(
        "Draining",
        lambda: any(
            c["type"] == "Draining" and c["status"] == "True"
            for c in status().get("conditions", [])
        ),
    )
    assert status()["phase"] == "Pending"
    assert (_acc(stack.client, CARD1) or {})["spec"]["cordoned"] is True
    # the agent keeps reporting the device without touching allocatedTo
    assert (_acc(stack.client, CARD1) or {})["status"]["allocatedTo"][0]["name"] == "c0"
    allocate([])
    wait_for("Succeeded", lambda: status().get("phase") == "Succeeded")
    wait_for("uncordoned", lambda: (_acc(stack.client, CARD1) or {})["spec"]["cordoned"] is False)
