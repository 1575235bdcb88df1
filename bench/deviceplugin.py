"""Device plugin latencies over the real unix socket, and re-registration after a kubelet restart.

Prints one JSON object. Targets (DESIGN.md): Allocate p99 <= 2 ms; re-registration <= 1 s.
Allocate and GetPreferredAllocation are called through gRPC on the socket of a
``kubeacc device-plugin`` process, the way the kubelet calls them. ``--kubelet`` also starts
the testbed (real kubelet), restarts the kubelet a few times and measures how long after the
new kubelet.sock appears the plugin has registered again.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import grpc
from kubelet_client import stubs

from kubeacc.agent.deviceplugin.config import DevicePluginConfig
from kubeacc.agent.deviceplugin.manager import DevicePluginManager
from kubeacc.agent.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from kubeacc.discovery import discover
from kubeacc.model import DeviceType
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)


def _plugin_process(host: Path, plugin_dir: Path, log: Path) -> subprocess.Popen[bytes]:
    """``kubeacc device-plugin`` for the GPUs, serving once its socket exists."""
    proc = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "kubeacc"),
            "device-plugin",
            f"--host-root={host}",
            f"--plugin-dir={plugin_dir}",
            "--type=gpu",
        ],
        stdout=log.open("wb"),
        stderr=subprocess.STDOUT,
    )
    deadline = time.monotonic() + 30
    while not (plugin_dir / "kubeacc-gpu.sock").exists():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            raise RuntimeError(log.read_text())
        time.sleep(0.05)
    return proc


def rpc_latencies(runs: int) -> dict[str, object]:
    with tempfile.TemporaryDirectory() as tmp:
        host = profiles.build("dgx-h100", Path(tmp) / "host")
        inv = discover(SyntheticHost(host))
        plugin_dir = Path(tmp) / "dp"
        plugin_dir.mkdir()  # the kubelet's directory: the plugin refuses one that is missing
        plugin = _plugin_process(host, plugin_dir, Path(tmp) / "plugin.log")
        ids = sorted(d.pci_bus_id for d in inv.by_type(DeviceType.GPU) if d.pci_bus_id)
        with grpc.insecure_channel(f"unix://{plugin_dir / 'kubeacc-gpu.sock'}") as channel:
            stub = stubs("deviceplugin_v1beta1_pb2_grpc").DevicePluginStub(channel)
            alloc_req = pb.AllocateRequest(
                container_requests=[pb.ContainerAllocateRequest(devices_ids=ids[:2])]
            )
            pref_req = pb.PreferredAllocationRequest(
                container_requests=[
                    pb.ContainerPreferredAllocationRequest(
                        available_deviceIDs=ids, allocation_size=4
                    )
                ]
            )
            stub.Allocate(alloc_req)
            stub.GetPreferredAllocation(pref_req)
            alloc, pref = [], []
            for _ in range(runs):
                start = time.perf_counter()
                stub.Allocate(alloc_req)
                alloc.append((time.perf_counter() - start) * 1000)
                start = time.perf_counter()
                stub.GetPreferredAllocation(pref_req)
                pref.append((time.perf_counter() - start) * 1000)
        plugin.terminate()
        plugin.wait(15)
    return {
        "allocate_p50_ms": round(statistics.median(alloc), 3),
        "allocate_p99_ms": _pct(alloc, 0.99),
        "allocate_target_p99_ms": 2.0,
        "preferred_allocation_p50_ms": round(statistics.median(pref), 3),
        "preferred_allocation_p99_ms": _pct(pref, 0.99),
        "runs": runs,
    }


def reregistration(restarts: int) -> dict[str, object]:
    from kubeacc.testbed.testbed import Testbed

    delays = []
    with tempfile.TemporaryDirectory() as tmp, Testbed.start(Path(tmp) / "tb") as tb:
        inv = discover(SyntheticHost(profiles.build("dgx-h100", Path(tmp) / "host")))
        kubelet_sock = tb.kubelet.kubelet_socket
        manager = DevicePluginManager(
            tb.kubelet.device_plugin_dir, DevicePluginConfig.for_types([DeviceType.GPU])
        )
        manager.start(inv)
        for _ in range(restarts):
            registered = manager.registrations
            tb.kubelet.restart()
            deadline = time.monotonic() + 30
            while manager.registrations == registered and time.monotonic() < deadline:
                time.sleep(0.01)
            # The kubelet's new socket's mtime is when it started listening; the manager
            # records the wall-clock time of its Register call.
            created = kubelet_sock.stat().st_mtime_ns / 1e9
            if manager.last_registration is not None and manager.registrations > registered:
                delays.append((manager.last_registration - created) * 1000)
        manager.stop()
    return {
        "kubelet_restarts": restarts,
        "reregistration_ms": [round(d, 1) for d in delays],
        "reregistration_max_ms": round(max(delays), 1) if delays else None,
        "reregistration_target_ms": 1000,
    }


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=2000)
    parser.add_argument("--kubelet", action="store_true", help="also measure re-registration")
    args = parser.parse_args()
    load = round(os.getloadavg()[0], 2)
    result: dict[str, object] = {
        "benchmark": "deviceplugin",
        "load_1min": load,
        **rpc_latencies(args.runs),
    }
    if args.kubelet:
        result.update(reregistration(3))
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
