"""The GPU part of a shared GPU's unit ID, for the readers of the kubelet's pod resources.

Its own module so that the node agent (kubeacc.agent.users, the telemetry's holders) can map
an allocated unit back to its GPU without importing the device plugin's allocation code
(kubeacc.deviceplugin.shared, where the IDs are made).
"""

from __future__ import annotations


def id_gpu_key(device_id: str) -> str:
    """The part of a unit ID that names its GPU (the key of ``shared.id_gpus``)."""
    return device_id.split("-", 1)[0]
