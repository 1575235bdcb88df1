"""Device plugin latencies over the real unix socket, and re-registration after a kubelet restart.

Prints one JSON object. Targets (DESIGN.md): Allocate p99 <= 2 ms; re-registration <= 1 s.
Allocate and GetPreferredAllocation are called through gRPC on the socket of a
``kubeacc device-plugin`` process, the way the kubelet calls them. ``--kubelet`` also starts
the testbed (real kubelet), restarts the kubelet a few times and measures how long after the
new kubelet.sock appears the plugin has registered again.

``--peer``: Allocate beside upstream's sample device plugin (bench/go_peers.py) in the same run:
both plugins started once, then blocks of ``--runs / --blocks`` calls alternating between them,
each over its own grpcio channel, each asking for two devices for one container (kube-acc: two
GPUs by their IDs; the sample plugin: its ``Dev-1`` and ``Dev-2``). The sample plugin registers
at a grpcio kubelet stand-in first (it exits when it cannot). What each Allocate does: kube-acc
answers device nodes, CDI devices and environment for the GPUs; the sample plugin creates a file
per device under /tmp and answers mounts of them, logging the request at INFO.
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
from daemon_start import KubeletStandIn
from go_peers import SAMPLE_DEVICES, SAMPLE_RESOURCE, in_plugin_dir, peer, peer_env
from kubelet_client import stubs

from kubeacc.deviceplugin.config import DevicePluginConfig
from kubeacc.deviceplugin.manager import DevicePluginManager
from kubeacc.discovery import discover
from kubeacc.model import DeviceType
from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as pb
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed.procs import cpu_seconds


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


def _sample_plugin(
    plugin_dir: Path, log: Path
) -> tuple[subprocess.Popen[bytes], Path, KubeletStandIn]:
    """Upstream's sample device plugin, registered at a kubelet stand-in in ``plugin_dir``;
    (process, its socket, the stand-in to stop after it)."""
    kubelet = KubeletStandIn(plugin_dir)
    with log.open("wb") as out:
        proc = subprocess.Popen(
            in_plugin_dir(plugin_dir, [str(peer("sample-device-plugin"))]),
            stdout=out,
            stderr=subprocess.STDOUT,
            env=peer_env(),
        )
    if not kubelet.arrived.wait(30) or kubelet.resource != SAMPLE_RESOURCE:
        proc.kill()
        kubelet.stop()
        raise RuntimeError(f"the sample device plugin did not register:\n{log.read_text()}")
    return proc, plugin_dir / kubelet.endpoint, kubelet


def _allocate_ms(stub: object, request: pb.AllocateRequest, runs: int) -> list[float]:
    times = []
    for _ in range(runs):
        start = time.perf_counter()
        stub.Allocate(request)  # type: ignore[attr-defined]
        times.append((time.perf_counter() - start) * 1000)
    return times


def _latency(times: list[float]) -> dict[str, float]:
    return {
        "p50": round(statistics.median(times), 3),
        "p90": _pct(times, 0.90),
        "p99": _pct(times, 0.99),
        "max": round(max(times), 3),
    }


def beside_sample_plugin(runs: int, blocks: int) -> dict[str, object]:
    """Allocate p50/p99 of kube-acc's plugin and the sample plugin, blocks alternating."""
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        host = profiles.build("dgx-h100", work / "host")
        inv = discover(SyntheticHost(host))
        ids = sorted(d.pci_bus_id for d in inv.by_type(DeviceType.GPU) if d.pci_bus_id)
        (work / "dp").mkdir()
        (work / "sample").mkdir()
        ours = _plugin_process(host, work / "dp", work / "plugin.log")
        theirs, socket, kubelet = _sample_plugin(work / "sample", work / "sample.log")
        service = stubs("deviceplugin_v1beta1_pb2_grpc").DevicePluginStub
        sides = {
            "kubeacc": (work / "dp" / "kubeacc-gpu.sock", ids[:2]),
            "sample": (socket, SAMPLE_DEVICES),
        }
        times: dict[str, list[float]] = {name: [] for name in sides}
        pids = {"kubeacc": ours.pid, "sample": theirs.pid}
        cpu = dict.fromkeys(sides, 0.0)  # seconds of each plugin process in its timed calls
        try:
            channels = {
                name: grpc.insecure_channel(f"unix://{sock}") for name, (sock, _) in sides.items()
            }
            for n in range(blocks):
                order = list(sides) if n % 2 == 0 else list(reversed(sides))
                for name in order:
                    request = pb.AllocateRequest(
                        container_requests=[pb.ContainerAllocateRequest(devices_ids=sides[name][1])]
                    )
                    stub = service(channels[name])
                    _allocate_ms(stub, request, 20)  # warm-up: connection, caches
                    used = cpu_seconds(pids[name])
                    times[name] += _allocate_ms(stub, request, runs // blocks)
                    cpu[name] += cpu_seconds(pids[name]) - used
            for channel in channels.values():
                channel.close()
        finally:
            for proc in (ours, theirs):
                proc.terminate()
                proc.wait(15)
            kubelet.stop()
    a, b = _latency(times["kubeacc"]), _latency(times["sample"])
    return {
        "allocate_devices": 2,
        "kubeacc_allocate_ms": a,
        "sample_plugin_allocate_ms": b,
        "ratio_p50": round(a["p50"] / b["p50"], 2),
        "ratio_p99": round(a["p99"] / b["p99"], 2),
        # process CPU per call (user + system, 10 ms clock ticks summed over the blocks):
        # what a call costs the node, less bent by the machine's load than latency
        "kubeacc_cpu_us_per_call": round(cpu["kubeacc"] * 1e6 / len(times["kubeacc"]), 1),
        "sample_plugin_cpu_us_per_call": round(cpu["sample"] * 1e6 / len(times["sample"]), 1),
        "target_ratio_p99": 1.5,
        "calls_each": len(times["kubeacc"]),
        "blocks": blocks,
    }


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
    parser.add_argument(
        "--peer", action="store_true", help="Allocate beside upstream's sample device plugin"
    )
    parser.add_argument("--blocks", type=int, default=10, help="alternating blocks (--peer)")
    args = parser.parse_args()
    load = round(os.getloadavg()[0], 2)
    result: dict[str, object] = {"benchmark": "deviceplugin", "load_1min": load}
    if args.peer:
        peer("sample-device-plugin")  # build (or find) it before anything is timed
        result["beside_sample_plugin"] = beside_sample_plugin(args.runs, args.blocks)
    else:
        result.update(rpc_latencies(args.runs))
    if args.kubelet:
        result.update(reregistration(3))
    result["load_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
