"""The life-cycle agent's Cyborg side built on the lane's cloud, for the tests of FPGA
programming routed to Cyborg (test_cyborgops.py, test_cyborg_e2e.py)."""

from __future__ import annotations

import hashlib
import json
import urllib.request
from pathlib import Path
from typing import Any

from kubeacc.lifecycle.cyborgops import CyborgOperations
from kubeacc.node.cyborg.client import Credentials, CyborgClient
from kubeacc.node.cyborg.glance import GlanceImages
from kubeacc.node.cyborg.inventory import CyborgInventory
from kubeacc.node.operations.bitstreams import BitstreamLibrary
from kubeacc.testbed.cyborgcloud import CyborgCloud
from tests.agent.dra.cyborg.conftest import PROJECT, USER
from tests.conftest import CYBORG_FPGA_NODE


def credentials(cloud: CyborgCloud, **override: str) -> Credentials:
    """What the Secret holds for the lane's cloud, Glance included (``override``: URLs)."""
    values = {
        "cyborg_url": cloud.cyborg_url,
        "placement_url": cloud.placement_url,
        "glance_url": cloud.glance_url,
        **override,
    }
    return Credentials(**values, token="admin", project_id=PROJECT, user_id=USER)


def operations(cloud: CyborgCloud, library: Path, **override: str) -> CyborgOperations:
    """As ``kubeacc lifecycle-agent --inventory cyborg`` builds it, for the PAC host."""
    creds = credentials(cloud, **override)
    client = CyborgClient(creds)
    inventory = CyborgInventory(client, CYBORG_FPGA_NODE, None, every_unit=True)
    return CyborgOperations(
        client,
        inventory,
        BitstreamLibrary(library),
        lambda: GlanceImages(creds),
        afu_report_s=120,  # Cyborg's agent reports once a minute
        poll_s=0.5,
    )


def glance_images(cloud: CyborgCloud) -> list[dict[str, Any]]:
    with urllib.request.urlopen(cloud.glance_url + "/v2/images", timeout=10) as resp:
        return list(json.loads(resp.read())["images"])


def sha(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()
