"""The Cyborg cloud of the tests (kubeacc.testbed.cyborgcloud): the real services, installed from
their packages, report the fake driver's device and the synthetic PAC card (Cyborg's Intel
driver) through Cyborg's v2 API and Placement."""

from __future__ import annotations

import subprocess

import pytest

from kubeacc.testbed.cyborgcloud import FAKE_SLOTS, CyborgCloud, cyborg_dir
from tests.conftest import CYBORG_FPGA_NODE, CYBORG_NODE

pytestmark = pytest.mark.cyborg


def test_devices_deployables_and_providers_are_listed(cyborg_cloud: CyborgCloud) -> None:
    devices = cyborg_cloud.cyborg("GET", "/v2/devices")["devices"]
    assert sorted((d["hostname"], d["type"]) for d in devices) == sorted(
        [(CYBORG_NODE, "FPGA"), (CYBORG_FPGA_NODE, "FPGA")]
    )
    deployables = cyborg_cloud.cyborg("GET", "/v2/deployables")["deployables"]
    assert len(deployables) == 2 and FAKE_SLOTS in [d["num_accelerators"] for d in deployables]
    providers = cyborg_cloud.placement("GET", f"/resource_providers?name={CYBORG_NODE}")
    (root,) = providers["resource_providers"]
    tree = cyborg_cloud.placement("GET", f"/resource_providers?in_tree={root['uuid']}")
    (child,) = [rp for rp in tree["resource_providers"] if rp["uuid"] != root["uuid"]]
    assert child["name"] in {d["name"] for d in deployables}
    inventories = cyborg_cloud.placement("GET", f"/resource_providers/{child['uuid']}/inventories")
    assert inventories["inventories"]["FPGA"]["total"] == FAKE_SLOTS


def test_every_service_runs_and_the_venv_is_the_cached_one(cyborg_cloud: CyborgCloud) -> None:
    cyborg_cloud.check()
    assert cyborg_cloud.venv is not None
    assert cyborg_cloud.venv.parent == cyborg_dir()
    names = set(cyborg_cloud.procs)
    assert names == {
        "rabbitmq",
        "placement",
        "cyborg-api",
        "cyborg-conductor",
        f"cyborg-agent-{CYBORG_NODE}",
        f"cyborg-agent-{CYBORG_FPGA_NODE}",
        "glance",
    }
    # the project's own venv has none of OpenStack's libraries
    import importlib.util

    assert importlib.util.find_spec("oslo_config") is None
    out = subprocess.run(
        [str(cyborg_cloud.venv / "bin/python"), "-c", "import cyborg, placement"],
        capture_output=True,
        check=False,
    )
    assert out.returncode == 0, out.stderr
