"""The driver's DeviceClasses: loaded from the shipped manifest, applied server-side."""

from __future__ import annotations

from importlib import resources
from typing import Any, cast

import yaml
from lightkube import Client
from lightkube.resources.resource_v1 import DeviceClass

from kubeacc.agent.dra import FIELD_MANAGER

CLASS_NAMES = (
    "gpu.kubeacc.io",
    "mig.kubeacc.io",
    "fpga.kubeacc.io",
    "nic.kubeacc.io",
    "xpu.kubeacc.io",
    "accelerator.kubeacc.io",
)


def manifest_text() -> str:
    return resources.files("kubeacc.agent.dra").joinpath("deviceclasses.yaml").read_text()


def device_classes() -> list[dict[str, Any]]:
    """The DeviceClass objects of ``deviceclasses.yaml``."""
    return [doc for doc in yaml.safe_load_all(manifest_text()) if doc]


def apply_device_classes(client: Client, field_manager: str = FIELD_MANAGER) -> list[str]:
    """Create or update every class (server-side apply); returns their names."""
    names = []
    for doc in device_classes():
        client.apply(
            cast(DeviceClass, DeviceClass.from_dict(doc)), field_manager=field_manager, force=True
        )
        names.append(str(doc["metadata"]["name"]))
    return names
