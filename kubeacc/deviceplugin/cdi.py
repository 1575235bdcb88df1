"""The CDI spec behind the device plugin's CDI names (``kubeacc.io/device=<device name>``).

One spec for the node, one CDI device per accelerator with its device nodes; the environment
(``ACCELERATOR_UNITS``...) comes with the Allocate response. Rewritten atomically whenever the
inventory changes, so a runtime never resolves a name to a device that is gone.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from kubeacc.model import Device
from kubeacc.node.atomic import write_atomic
from kubeacc.node.cdi import CDI_VERSION, device_node, node_gids
from kubeacc.node.userspace.groups import cdi_version

CDI_KIND = "kubeacc.io/device"
SPEC_NAME = "kubeacc.io-device.json"
#: The CDI device of the NVIDIA driver's user space, named beside an NVIDIA GPU's own.
DRIVER_DEVICE = "nvidia-driver"


def build_spec(devices: Iterable[Device], device_root: Path = Path("/")) -> dict[str, Any]:
    entries = []
    gids: set[int] = set()
    for dev in sorted(devices, key=lambda d: d.name):
        edits: dict[str, Any] = {"env": [f"KUBEACC_DEVICE={dev.pci_bus_id or dev.name}"]}
        if dev.device_nodes:
            edits["deviceNodes"] = [device_node(n, device_root) for n in dev.device_nodes]
            groups = node_gids(edits["deviceNodes"])
            if groups:
                edits["additionalGids"] = sorted(groups)  # kubeacc.node.userspace.groups
                gids |= groups
        entries.append({"name": dev.name, "containerEdits": edits})
    return {"cdiVersion": cdi_version(CDI_VERSION, gids), "kind": CDI_KIND, "devices": entries}


def write_spec(cdi_dir: Path, spec: dict[str, Any]) -> Path:
    path = cdi_dir / SPEC_NAME
    data = json.dumps(spec, indent=1, sort_keys=True).encode()
    try:
        if path.read_bytes() == data:
            return path
    except OSError:
        pass
    cdi_dir.mkdir(parents=True, exist_ok=True)
    write_atomic(path, data, durable=False)
    return path
