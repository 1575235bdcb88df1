"""A claim source in memory and a driver on it, for the driver tests that need no API server."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kubeacc.agent.dra.devices import device_index
from kubeacc.agent.dra.driver import Driver
from kubeacc.model import Inventory

NODE = "n1"


class Claims:
    """ResourceClaims as the API server would return them."""

    def __init__(self) -> None:
        self.objs: dict[tuple[str, str], dict[str, Any]] = {}

    def add(self, name: str, uid: str, devices: list[str], pool: str = NODE, **extra: Any) -> None:
        results = [
            {"request": "r", "driver": "kubeacc.io", "pool": pool, "device": d} for d in devices
        ]
        self.objs[("ns", name)] = {
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "status": {"allocation": {"devices": {"results": results, **extra}}},
        }

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        return self.objs.get((namespace, name))


def memory_driver(tmp: Path, claims: Claims, inv: Inventory) -> Driver:
    """A driver of node :data:`NODE` on ``claims``, its CDI specs and state under ``tmp``."""
    index = device_index(inv)
    return Driver(NODE, claims, lambda: index, cdi_dir=tmp / "cdi", state_dir=tmp / "state")
