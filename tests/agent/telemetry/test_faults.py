"""Faults in the telemetry: an injected XID 79, ECC, a GPU off the bus, a link down, each
reported once, when it appears."""

from __future__ import annotations

import json

from kubeacc.agent.telemetry.faults import DeviceFault, FaultDetector
from kubeacc.agent.telemetry.sampler import TelemetrySampler
from kubeacc.agent.telemetry.series import Reading
from kubeacc.crds.remediation import EventClass
from kubeacc.synthetic.host import SyntheticHost
from tests.hosts import HostFactory, discover


def test_injected_xid_79_and_lost_gpu_reach_on_faults(hosts: HostFactory) -> None:
    root = hosts.copy("l4-pair")
    host = SyntheticHost(root)
    inv = discover(host)
    gpus = sorted((d for d in inv.devices if d.vendor == "NVIDIA"), key=lambda d: d.index)
    seen: list[DeviceFault] = []
    sampler = TelemetrySampler("n", host, host.nvml, lambda: inv, dict, on_faults=seen.extend)
    tell = root / ".synthetic/telemetry.json"
    tell.write_text(json.dumps({"gpus": {"0": {"ecc": {"uncorrected": 4}}}}))
    sampler.sample_once()
    assert seen == []  # a healthy start; ECC counts from before are a baseline
    tell.write_text(json.dumps({"gpus": {"0": {"ecc": {"uncorrected": 4}, "xids": [79]}}}))
    sampler.sample_once()
    assert seen == [DeviceFault(gpus[0].name, EventClass.XID, 79)]
    sampler.sample_once()
    assert len(seen) == 1  # reported once
    tell.write_text(
        json.dumps({"gpus": {"0": {"ecc": {"uncorrected": 5}, "xids": [79]}, "1": {"lost": True}}})
    )
    sampler.sample_once()
    assert seen[1:] == [
        DeviceFault(gpus[0].name, EventClass.ECC_UNCORRECTABLE, detail="5"),
        DeviceFault(gpus[1].name, EventClass.FALLEN_OFF_BUS),
    ]
    sampler.sample_once()
    assert len(seen) == 3


def test_link_down_and_port_error_once_and_what_is_wrong_from_the_start() -> None:
    d = FaultDetector()
    first = d.update(
        [
            Reading("up", "gpu-a", 0),
            Reading("link_up", "nic-a", 1, ("eth0",)),
            Reading("port_errors", "fpga-a", 0, ("dfl-port.0",)),
        ]
    )
    assert first == [DeviceFault("gpu-a", EventClass.FALLEN_OFF_BUS)]
    second = d.update(
        [
            Reading("up", "gpu-a", 0),
            Reading("link_up", "nic-a", 0, ("eth0",)),
            Reading("port_errors", "fpga-a", 16, ("dfl-port.0",)),
        ]
    )
    assert second == [  # in the order of the series' names
        DeviceFault("nic-a", EventClass.LINK_DOWN, detail="eth0"),
        DeviceFault("fpga-a", EventClass.FPGA_PORT_ERROR, detail="dfl-port.0: 0x10"),
    ]
    assert d.update([Reading("link_up", "nic-a", 0, ("eth0",))]) == []
