"""An action that ran while the API server went away is reported once it is back: the report
of what a target came to is written again, never left Running (docs/lifecycle.md, "Faults").

The FPGA's partial reconfiguration takes seconds on the synthetic host; the API server is
stopped while it runs, so the agent's report of the result fails; after the API server is back
the operation must end Succeeded with the AFU, and the card must have been programmed once.
"""

from __future__ import annotations

import hashlib
import logging
import uuid
from pathlib import Path
from typing import Any

import pytest
from lightkube.types import PatchType

from kubeacc.controller.controller import Controller
from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.resources import Accelerator, AcceleratorPolicy, as_dict, install_crds
from kubeacc.lifecycle.agent import LifecycleAgent
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import PR_SECONDS_FILE, SyntheticKernel, actions
from kubeacc.synthetic.profiles import build
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import agent_cert_client, install_agent_access
from tests.crdfixtures import create_operation, operation_finished, running, wait_for

IFACE1 = "9926ab6d6c925a68aabca7d84c545738"  # the profile's PAC Arria 10 (empty)
NEW_AFU = "c000c9660d824272a95dd4c5d2f3b4a1"
PORT_AFU = "sys/bus/platform/devices/dfl-port.1/afu_id"


@pytest.mark.cluster
def test_a_result_the_api_server_missed_is_reported_when_it_is_back(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.ERROR, logger="kubeacc.lifecycle.agent")
    root = build("intel-fpga-dfl", tmp_path / "host")
    (root / PR_SECONDS_FILE).write_text("3")
    library = tmp_path / "bitstreams"
    library.mkdir()
    image = make_gbs(NEW_AFU, IFACE1, b"\x00partial" * 64, name="nlb0")
    (library / "nlb0.gbs").write_bytes(image)
    digest = hashlib.sha256(image).hexdigest()
    with Testbed.start() as tb:
        node = tb.node_name
        card = f"{node}-fpga-0000-af-00-0"
        client = tb.client(field_manager="kubeacc-test")
        install_crds(client)
        install_agent_access(client)
        policy = {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorPolicy",
            "metadata": {"name": "outage"},
            "spec": {
                "selector": {"types": ["fpga"]},
                "allowedBitstreams": [{"name": "nlb0.gbs", "sha256": digest}],
            },
        }
        client.patch(AcceleratorPolicy, "outage", policy, patch_type=PatchType.APPLY, force=True)
        agent = LifecycleAgent(
            agent_cert_client(tb, node, tmp_path),
            node_name=node,
            host=SyntheticHost(root, kernel=SyntheticKernel(root)),
            bitstream_dir=library,
            interval=0.3,
        )
        ctl = Controller(
            tb.client(field_manager="kubeacc-controller"),
            identity="outage",
            lease_namespace="default",
            lease_name=f"kubeacc-outage-{uuid.uuid4().hex[:5]}",
            interval=0.3,
            admin_namespaces=[ANY_NAMESPACE],
        )
        with running(agent, ctl):
            wait_for("the card's Accelerator", lambda: _acc(client, card), 60)
            spec = {
                "action": "Program",
                "targets": [card],
                "program": {"bitstream": "nlb0.gbs", "sha256": digest},
            }
            create_operation(client, "default", "program", spec)
            wait_for("the partial reconfiguration started", lambda: actions(root), 60)
            tb.stop_apiserver()
            wait_for(
                "the agent's report refused",
                lambda: any("program" in r.getMessage() for r in caplog.records),
                60,
            )
            assert (root / PORT_AFU).read_text().strip() == NEW_AFU
            tb.start_apiserver()
            done = wait_for(
                "operation finished",
                lambda: operation_finished(client, "default", "program"),
                120,
            )
            assert done["status"]["phase"] == "Succeeded", done["status"]
            (result,) = done["status"]["results"]
            assert (result["phase"], result["afuId"]) == ("Succeeded", NEW_AFU), result
            # programmed once, and the Accelerator says what the card carries
            assert [a["action"] for a in actions(root)] == ["program"]
            wait_for(
                "the Accelerator shows the new AFU",
                lambda: _afu(_acc(client, card)) == NEW_AFU,
                60,
            )


def _acc(client: Any, name: str) -> dict[str, Any] | None:
    try:
        return as_dict(client.get(Accelerator, name))
    except Exception:  # not there yet, or the API server away
        return None


def _afu(acc: dict[str, Any] | None) -> str | None:
    fpga = (((acc or {}).get("status") or {}).get("device") or {}).get("fpga") or {}
    afu: str | None = fpga.get("afuId")
    return afu
