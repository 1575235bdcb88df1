"""``kubeacc top`` against a real metrics port serving a synthetic node's telemetry."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.agent.telemetry.holders import Holder
from kubeacc.agent.telemetry.sampler import TelemetrySampler
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.metrics.http import ProbeServer
from kubeacc.synthetic.host import SyntheticHost
from tests.cli.clirun import assert_one_line_error, kubeacc
from tests.hosts import HostFactory, discover


@pytest.fixture
def endpoint(hosts: HostFactory) -> Iterator[tuple[str, Path, list[str]]]:
    root = hosts.copy("l4-pair")
    host = SyntheticHost(root)
    inv = discover(host)
    gpus = sorted(d.name for d in inv.devices if d.vendor == "NVIDIA")
    held = {gpus[0]: [Holder("team-a", "trainer", "main", ""), Holder("team-a", "", "", "c1")]}
    sampler = TelemetrySampler("node-7", host, host.nvml, lambda: inv, lambda: held)
    uuid = next(d.uuid for d in inv.devices if d.name == gpus[0])
    (root / ".synthetic/telemetry.json").write_text(
        json.dumps({"gpus": {uuid: {"utilization": {"gpu": 77}, "ecc": {"uncorrected": 2}}}})
    )
    sampler.sample_once()
    metrics = AgentMetrics()
    metrics.registry.register(sampler.collector)
    server = ProbeServer("127.0.0.1:0", metrics.registry)
    server.start()
    try:
        yield f"http://127.0.0.1:{server.port}/metrics", root, gpus
    finally:
        server.stop()


def test_top_prints_each_device_with_its_users(
    endpoint: tuple[str, Path, list[str]], tmp_path: Path
) -> None:
    url, _, gpus = endpoint
    result = kubeacc("top", "--endpoint", url, home=tmp_path)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].split() == [
        "NODE",
        "DEVICE",
        "MODEL",
        "UTIL",
        "MEMORY",
        "TEMP",
        "POWER",
        "ERRORS",
        "USERS",
    ]
    used = next(line for line in lines if gpus[0] in line)
    assert "77%" in used and "team-a/trainer/main, team-a/claim:c1" in used
    assert " 2 " in used  # the uncorrected ECC errors, counted once
    idle = next(line for line in lines if gpus[1] in line)
    assert idle.startswith("node-7") and idle.endswith("<none>")
    assert "\x1b" not in result.stdout  # piped: plain columns


def test_top_json_and_node_filter(endpoint: tuple[str, Path, list[str]], tmp_path: Path) -> None:
    url, _, gpus = endpoint
    out = json.loads(kubeacc("top", "--endpoint", url, "-o", "json", home=tmp_path).stdout)
    assert [d["device"] for d in out["devices"]] == gpus
    assert out["devices"][0]["utilization"] == 0.77
    other = kubeacc("top", "--endpoint", url, "--node", "elsewhere", home=tmp_path)
    assert other.returncode == 0 and other.stdout == ""


def test_unreachable_endpoint_is_one_line(tmp_path: Path) -> None:
    result = kubeacc("top", "--endpoint", "http://127.0.0.1:1/metrics", home=tmp_path)
    assert_one_line_error(result, 1, "127.0.0.1:1")
