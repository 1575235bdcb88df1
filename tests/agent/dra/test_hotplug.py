"""The agent's loop: a health change and a hot-unplug on the host show up in the slices."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceSlice

from kubeacc.agent.compose import compose_agent
from kubeacc.agent.dra.devices import UNHEALTHY_TAINT
from kubeacc.agent.options import options_from
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.model import HealthState
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed import Testbed

from ...testbed.helpers import eventually

pytestmark = pytest.mark.cluster


def _devices(client: Client, node: str) -> tuple[set[int], dict[str, object]]:
    slices = list(
        client.list(ResourceSlice, fields={"spec.nodeName": node, "spec.driver": DRIVER_NAME})
    )
    gens = {s.spec.pool.generation for s in slices}
    return gens, {d.name: d for s in slices for d in s.spec.devices}


def _until(probe: Callable[[], bool], what: str) -> None:
    eventually(probe, 30, what)


def test_health_change_and_hot_unplug_are_published(
    testbed: Testbed, kube_client: Client, api_node: str, tmp_path: Path
) -> None:
    host = profiles.build("kunlun-xpu", tmp_path / "host")
    agent = compose_agent(
        SyntheticHost(host),
        options_from(
            node_name=api_node,
            kubeconfig=testbed.kubeconfig,
            cdi_dir=tmp_path / "cdi",
            state_dir=tmp_path / "state",
            rediscover_interval=0.2,
            kubelet_plugin=False,
        ),
    )
    agent.start()
    try:
        _until(lambda: "xpu-0000-3d-00-0" in _devices(kube_client, api_node)[1], "slices")
        gens, devs = _devices(kube_client, api_node)
        assert gens == {1}
        assert not getattr(devs["xpu-0000-3d-00-0"], "taints", None)

        # the kernel driver lets go of one XPU: unhealthy -> tainted, new generation
        os.unlink(host / "sys/bus/pci/devices/0000:3d:00.0/driver")

        def tainted() -> bool:
            gens, devs = _devices(kube_client, api_node)
            taints = getattr(devs.get("xpu-0000-3d-00-0"), "taints", None) or []
            return gens == {2} and [t.key for t in taints] == [UNHEALTHY_TAINT]

        _until(tainted, "taint on the XPU")
        snap = {d.device.device_name: d.health for d in agent.board.snapshot().devices}
        assert snap["xpu-0000-3d-00-0"] == 2  # UNHEALTHY in the health stream
        assert agent.inventory.devices[0].health.state in set(HealthState)

        # another XPU disappears from the bus
        os.unlink(host / "sys/bus/pci/devices/0000:3e:00.0")
        _until(
            lambda: "xpu-0000-3e-00-0" not in _devices(kube_client, api_node)[1],
            "unplugged XPU gone from the slice",
        )
        assert _devices(kube_client, api_node)[0] == {3}
    finally:
        agent.stop()
