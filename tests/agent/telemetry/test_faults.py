"""Faults in the telemetry: an injected XID 79, ECC, a GPU off the bus, a link down, each
reported once, when it appears."""

from __future__ import annotations

import datetime as dt
import json

from kubeacc.agent.telemetry.faults import DeviceFault, FaultDetector
from kubeacc.agent.telemetry.report import report_of
from kubeacc.agent.telemetry.sampler import TelemetrySampler
from kubeacc.agent.telemetry.series import Reading
from kubeacc.crds.api import EventClass, health_failing_thresholds
from kubeacc.model import Health, HealthState
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


def test_a_restarted_agent_does_not_report_old_xids_again(hosts: HostFactory) -> None:
    """After a kill -9 the agent starts a new sampler: its XID event set delivers only XIDs
    from its registration on (as NVML's does), so an XID reported before the restart is not
    reported again with a new time; a new one is."""
    root = hosts.copy("l4-pair")
    host = SyntheticHost(root)
    inv = discover(host)
    gpu0 = min((d for d in inv.devices if d.vendor == "NVIDIA"), key=lambda d: d.index)
    tell = root / ".synthetic/telemetry.json"
    tell.write_text(json.dumps({"gpus": {"0": {}}}))
    before: list[DeviceFault] = []
    first = TelemetrySampler("n", host, host.nvml, lambda: inv, dict, on_faults=before.extend)
    first.sample_once()
    tell.write_text(json.dumps({"gpus": {"0": {"xids": [79]}}}))
    first.sample_once()
    assert before == [DeviceFault(gpu0.name, EventClass.XID, 79)]

    after: list[DeviceFault] = []
    again = SyntheticHost(root)  # a new process: its own NVML and event sets
    restarted = TelemetrySampler("n", again, again.nvml, lambda: inv, dict, on_faults=after.extend)
    restarted.sample_once()
    restarted.sample_once()
    assert after == []
    tell.write_text(json.dumps({"gpus": {"0": {"xids": [79, 48]}}}))
    restarted.sample_once()
    assert after == [DeviceFault(gpu0.name, EventClass.XID, 48)]


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


def test_health_failing_is_reported_at_the_policies_thresholds_only() -> None:
    d = FaultDetector()
    at = {2, 4}
    assert d.health({"gpu-a": "NVML: GPU is lost"}, at) == []  # 1st failure: no rule at 1
    assert d.health({"gpu-a": "NVML: GPU is lost", "gpu-b": "no kernel driver bound"}, at) == [
        DeviceFault("gpu-a", EventClass.HEALTH_FAILING, detail="NVML: GPU is lost", failures=2)
    ]
    assert d.health({"gpu-a": "NVML: GPU is lost", "gpu-b": "x"}, at) == [
        DeviceFault("gpu-b", EventClass.HEALTH_FAILING, detail="x", failures=2)
    ]
    assert [f.failures for f in d.health({"gpu-a": "lost"}, at)] == [4]
    assert d.health({"gpu-a": "lost"}, at) == []  # 5: past every threshold, no more writes
    assert d.health({}, at) == []  # healthy: the count starts again
    assert d.health({"gpu-a": "lost"}, frozenset()) == []  # no policy asks: nothing
    assert [f.failures for f in d.health({"gpu-a": "lost"}, at)] == [2]
    late = FaultDetector()  # a policy that arrives while a device has been failing a while
    for _ in range(3):
        assert late.health({"gpu-a": "lost"}, frozenset()) == []
    assert [f.failures for f in late.health({"gpu-a": "lost"}, {2})] == [4]
    assert late.health({"gpu-a": "lost"}, {2}) == []


def test_the_sampler_counts_discoverys_health_against_the_policies(hosts: HostFactory) -> None:
    host = SyntheticHost(hosts.copy("l4-pair"))
    inv = discover(host)
    gpu = next(d for d in inv.devices if d.vendor == "NVIDIA")
    sick = gpu.replace(health=Health(state=HealthState.UNHEALTHY, reason="lost"))
    now = {"inv": inv}
    seen: list[DeviceFault] = []
    policies = [
        {"spec": {"remediation": {"rules": [{"event": "HealthFailing", "failures": 2}]}}},
        {"spec": {"remediation": {"rules": [{"event": "Xid", "xids": [79]}, "junk"]}}},
        {"spec": {}},
    ]
    sampler = TelemetrySampler(
        "n",
        host,
        host.nvml,
        lambda: now["inv"],
        dict,
        on_faults=seen.extend,
        health_thresholds=lambda: health_failing_thresholds(policies),
    )
    sampler.sample_once()
    now["inv"] = inv.replace(devices=[sick if d.name == gpu.name else d for d in inv.devices])
    sampler.sample_once()
    assert seen == []
    sampler.sample_once()
    assert seen == [DeviceFault(gpu.name, EventClass.HEALTH_FAILING, detail="lost", failures=2)]
    assert report_of(seen[0], dt.datetime.now(dt.UTC)).failures == 2
    sampler.health_thresholds = lambda: 1 // 0  # type: ignore[assignment,misc]
    sampler.sample_once()  # thresholds unknown this pass: no fault, no crash
    assert len(seen) == 1
