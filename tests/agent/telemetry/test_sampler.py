"""The sampler and its collector: series on a registry, labelled with who holds the device."""

from __future__ import annotations

import json

from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from kubeacc.agent.dra.checkpoint import PreparedClaim, PreparedDevice
from kubeacc.agent.telemetry.holders import (
    MAX_HOLDERS,
    Holder,
    Holders,
    device_plugin_holders,
    dra_holders,
    merge,
)
from kubeacc.agent.telemetry.sampler import TelemetrySampler
from kubeacc.node.kubeletapi import podresources_v1_pb2 as pr
from kubeacc.synthetic.host import SyntheticHost
from tests.hosts import HostFactory, discover

Sample = tuple[str, dict[str, str], float]


def _scrape(registry: CollectorRegistry) -> list[Sample]:
    text = generate_latest(registry).decode()
    return [
        (s.name, s.labels, s.value)
        for fam in text_string_to_metric_families(text)
        for s in fam.samples
    ]


def _series(samples: list[Sample], name: str, **labels: str) -> list[Sample]:
    return [s for s in samples if s[0] == name and labels.items() <= s[1].items()]


def _pod(ns: str, name: str, container: str, resource: str, ids: list[str]) -> pr.PodResources:
    return pr.PodResources(
        name=name,
        namespace=ns,
        containers=[
            pr.ContainerResources(
                name=container,
                devices=[pr.ContainerDevices(resource_name=resource, device_ids=ids)],
            )
        ],
    )


def test_series_carry_node_model_and_holders(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    host = SyntheticHost(root)
    inv = discover(host)
    gpus = sorted((d for d in inv.devices if d.vendor == "NVIDIA"), key=lambda d: d.index)
    dra_gpu, dp_gpu, idle = gpus[0], gpus[1], gpus[2]
    assert dp_gpu.pci is not None and dra_gpu.uuid is not None
    prepared = {
        "uid-1": PreparedClaim(
            "team-a", "train", [PreparedDevice(["gpu"], "node-1", dra_gpu.name, ["x"])], {}
        )
    }
    claim = {"status": {"reservedFor": [{"resource": "pods", "name": "trainer", "uid": "p1"}]}}

    def holders() -> Holders:
        return merge(
            dra_holders(prepared, lambda ns, n, uid: claim, [d.name for d in inv.devices]),
            device_plugin_holders(
                [_pod("team-b", "infer", "server", "kubeacc.io/gpu", [dp_gpu.pci.bus_id])],
                {dp_gpu.pci.bus_id: dp_gpu.name},
            ),
        )

    sampler = TelemetrySampler("node-1", host, host.nvml, lambda: inv, holders, interval=10)
    registry = CollectorRegistry()
    registry.register(sampler.collector)
    assert _scrape(registry) == []  # nothing before the first pass

    (root / ".synthetic/telemetry.json").write_text(
        json.dumps({"gpus": {dra_gpu.uuid: {"utilization": {"gpu": 40}}}})
    )
    sampler.sample_once()
    samples = _scrape(registry)
    [trained] = _series(
        samples, "kubeacc_device_utilization_ratio", device=dra_gpu.name, engine="compute"
    )
    assert trained[1] == {
        "node": "node-1",
        "device": dra_gpu.name,
        "model": "NVIDIA H100 80GB HBM3",
        "namespace": "team-a",
        "pod": "trainer",
        "container": "",
        "claim": "train",
        "engine": "compute",
    }
    assert trained[2] == 0.4
    [served] = _series(samples, "kubeacc_device_memory_used_bytes", device=dp_gpu.name)
    assert (served[1]["namespace"], served[1]["pod"], served[1]["container"]) == (
        "team-b",
        "infer",
        "server",
    )
    [free] = _series(samples, "kubeacc_device_temperature_celsius", device=idle.name)
    assert free[1]["pod"] == free[1]["namespace"] == free[1]["claim"] == ""

    (root / ".synthetic/telemetry.json").write_text(
        json.dumps({"gpus": {dra_gpu.uuid: {"utilization": {"gpu": 85}, "xids": [79]}}})
    )
    sampler.sample_once()
    samples = _scrape(registry)
    [trained] = _series(
        samples, "kubeacc_device_utilization_ratio", device=dra_gpu.name, engine="compute"
    )
    assert trained[2] == 0.85
    [xid] = _series(samples, "kubeacc_device_xid_errors_total", device=dra_gpu.name)
    assert (xid[1]["xid"], xid[1]["pod"], xid[2]) == ("79", "trainer", 1)


def test_holders_of_a_partition_count_for_its_gpu_and_are_bounded() -> None:
    devices = ["gpu-a", "gpu-a-mig-0"]
    prepared = {
        f"u{i}": PreparedClaim(
            "ns", f"c{i:03}", [PreparedDevice(["r"], "n", "gpu-a-mig-0", ["x"])], {}
        )
        for i in range(MAX_HOLDERS + 10)
    }
    out = dra_holders(prepared, lambda ns, n, uid: None, devices)
    assert out["gpu-a-mig-0"][0] == Holder("ns", "", "", "c000")
    assert out["gpu-a"][0] == Holder("ns", "", "", "c000")
    assert len(out["gpu-a"]) == len(out["gpu-a-mig-0"]) == MAX_HOLDERS


def test_a_zero_interval_is_refused(hosts: HostFactory) -> None:
    host = SyntheticHost(hosts.copy("l4-pair"))
    try:
        TelemetrySampler("n", host, host.nvml, lambda: discover(host), dict, interval=0)
    except ValueError as err:
        assert "interval" in str(err)
    else:
        raise AssertionError("a zero interval was accepted")
