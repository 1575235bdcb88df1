"""API server load of idle node agents and of a burst of policy changes; the controller with
many Accelerators. Prints JSON.

Starts the testbed control plane without a kubelet and runs ``--agents`` node agents
(:class:`kubeacc.agent.runner.Agent`) as threads of this process, each on its own synthetic host
(``--profiles``, round robin) and its own Node object, plus one controller. What runs of each
agent is everything that talks to the API server: discovery (every ``--rediscover`` seconds,
10 rather than the agent's 5: on a synthetic host it is CPU work of this one process, and it
sends nothing while the devices stay the same; the once-a-minute re-check keeps its period),
ResourceSlice publishing
(with its periodic re-check), Node labels, the AcceleratorPolicy watch and the Accelerator sync
(watch of the node's Accelerators, ``status.allocatedTo``). What does not run is the kubelet
side (``kubelet_plugin=False``: no DRA socket, no registration, no claim watch, so no
prepare/unprepare); a claim watch per node is one more watch, no polling. The node's
Accelerators are created by the benchmark, as the life-cycle agent would (its own load:
``bench/lifecycle_api_load.py``).

Phases:

1. idle: after every agent has published, ``--idle`` seconds of nothing happening; requests
   of the agents and of the controller (httpx2's request lines, by thread), and the
   kube-apiserver's CPU time and RSS (``/proc``) over the window;
2. burst: ``--burst`` AcceleratorPolicy changes (a MemoryShared policy for all GPUs created,
   deleted, created, ...) ``--burst-gap`` seconds apart, counted until the agents are quiet;
3. controller scale (``--accelerators``, 0 to skip): the agents stopped, ``--scale-nodes`` Node
   objects and up to ``--accelerators`` Accelerators (``--per-node`` per node, with the status
   a life-cycle agent writes) created for at most ``--create-seconds``, and ``--policies``
   AcceleratorPolicies for all GPUs; then a fresh controller's time to list everything (its
   watch caches synced) and to run a full reconcile pass (three times), in a process of its own
   (its RSS), and the apiserver's CPU for it; with ``--compare DIR`` the same again with the
   ``kubeacc`` package found under DIR (say, an older checkout's), ``--rounds`` times each,
   alternating which goes first; the controller's RSS before its lists, after the passes and
   at its peak; the apiserver's and etcd's RSS.

    python bench/agent_api_load.py [--agents 100] [--idle 120] [--burst 6] [--accelerators 80000]
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from concurrent import futures
from pathlib import Path
from typing import Any

from apiload import (  # bench/, the script's directory
    Counts,
    RequestCounter,
    by_verb,
    deep_bytes,
    total,
)
from lightkube import ApiError, Client, KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from kubeacc.agent.compose import compose_agent
from kubeacc.agent.options import options_from
from kubeacc.agent.runner import Agent
from kubeacc.controller.controller import Controller
from kubeacc.crds.api import API_VERSION, NODE_LABEL
from kubeacc.crds.resources import Accelerator, AcceleratorPolicy, install_crds
from kubeacc.model import Device
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.profiles import build
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import cpu_seconds, rss_bytes

POLICY = "bench-shared-gpus"
MB = 1024 * 1024


def _component(thread: str) -> str:
    if thread.startswith("controller"):
        return "controller"
    if thread == "MainThread" or thread.startswith("bench"):
        return "bench"
    return "agents"


class ProcSampler:
    """CPU time and RSS of one process over a window (RSS sampled every second)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._stop = threading.Event()
        self.rss: list[int] = []
        self._thread = threading.Thread(target=self._run, name="bench-sampler", daemon=True)
        self._cpu0 = 0.0
        self._t0 = 0.0

    def _run(self) -> None:
        while not self._stop.wait(1.0):
            self.rss.append(rss_bytes(self.pid))

    def __enter__(self) -> ProcSampler:
        self._cpu0, self._t0 = cpu_seconds(self.pid), time.monotonic()
        self.rss.append(rss_bytes(self.pid))
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.cpu = cpu_seconds(self.pid) - self._cpu0
        self.wall = time.monotonic() - self._t0
        self.rss.append(rss_bytes(self.pid))

    def report(self) -> dict[str, float]:
        return {
            "cpu_cores": round(self.cpu / self.wall, 3),
            "rss_mb_first": round(self.rss[0] / MB, 1),
            "rss_mb_last": round(self.rss[-1] / MB, 1),
            "rss_mb_max": round(max(self.rss) / MB, 1),
        }


def _accelerator(node: str, device: str, status: dict[str, Any] | None) -> dict[str, Any]:
    body: dict[str, Any] = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {"name": f"{node}-{device}", "labels": {NODE_LABEL: node}},
        "spec": {"node": node, "deviceName": device},
    }
    if status is not None:
        body["status"] = status
    return body


def _put_accelerator(client: Client, body: dict[str, Any]) -> None:
    """Create one Accelerator and write its status (two requests, as the life-cycle agent)."""
    name = body["metadata"]["name"]
    status = body.pop("status", None)
    client.create(Accelerator.from_dict(body))
    if status is not None:
        client.patch(Accelerator.Status, name, {"status": status}, patch_type=PatchType.MERGE)


def _device_status(dev: Device) -> dict[str, Any]:
    return {
        "device": dev.to_json_dict(),
        "conditions": [
            {
                "type": "Present",
                "status": "True",
                "reason": "Discovered",
                "message": "",
                "lastTransitionTime": "2026-01-01T00:00:00Z",
            }
        ],
        "lastSeen": "2026-01-01T00:00:00Z",
    }


def _put_policy(client: Client, shared: bool, name: str = POLICY) -> None:
    if not shared:
        try:
            client.delete(AcceleratorPolicy, name)
        except ApiError as exc:
            if exc.status.code != 404:
                raise
        return
    spec = {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MemoryShared"}}
    policy = {"apiVersion": API_VERSION, "kind": "AcceleratorPolicy", "metadata": {"name": name}}
    client.apply(AcceleratorPolicy.from_dict({**policy, "spec": spec}), force=True)


def _rates(counts: Counts, seconds: float, nodes: int) -> dict[str, Any]:
    agents = total(counts, "agents")
    return {
        "seconds": round(seconds, 1),
        "agents_requests": agents,
        "per_node_requests_per_s": round(agents / seconds / nodes, 4),
        "controller_requests_per_s": round(total(counts, "controller") / seconds, 2),
        "agents_by_verb": by_verb(counts, "agents"),
        "controller_by_verb": by_verb(counts, "controller"),
    }


def _wait_quiet(counter: RequestCounter, quiet: float, limit: float) -> Counts:
    """Counts until the agents sent nothing for ``quiet`` seconds (or ``limit`` passed)."""
    got: Counts = counter.take()
    t0 = last = time.monotonic()
    while time.monotonic() - last < quiet and time.monotonic() - t0 < limit:
        time.sleep(0.5)
        more = counter.take()
        if total(more, "agents"):
            last = time.monotonic()
        got.update(more)
    return got


def agents_phase(
    tb: Testbed, args: argparse.Namespace, counter: RequestCounter, work: Path
) -> dict[str, Any]:
    admin = tb.client(field_manager="kubeacc-bench")
    profiles = args.profiles.split(",")
    nodes = [f"node-{i:04d}" for i in range(args.agents)]
    agents: list[Agent] = []
    stop = threading.Event()
    ctl = Controller(
        tb.client(field_manager="kubeacc-controller"),
        identity="bench",
        lease_namespace="default",
        lease_name="kubeacc-bench",
    )
    ctl_thread = threading.Thread(target=ctl.run, args=(stop,), name="controller", daemon=True)
    ctl_thread.start()
    t0 = time.monotonic()
    try:
        for i, node in enumerate(nodes):
            admin.create(Node(metadata=ObjectMeta(name=node)))
            d = work / node
            agent = compose_agent(
                SyntheticHost(build(profiles[i % len(profiles)], d / "host")),
                options_from(
                    node_name=node,
                    kubelet_root=d / "kubelet",
                    cdi_dir=d / "cdi",
                    state_dir=d / "state",
                    kubelet_plugin=False,
                    rediscover_interval=args.rediscover,
                ),
                client=tb.client(field_manager=f"kubeacc-agent-{node}"),
            )
            agent.start()
            agents.append(agent)
            with futures.ThreadPoolExecutor(4, thread_name_prefix="bench-put") as pool:
                list(
                    pool.map(
                        lambda dev, node=node: _put_accelerator(
                            admin, _accelerator(node, dev.name, None)
                        ),
                        agent.inventory.devices,
                    )
                )
        deadline = time.monotonic() + 300
        while not all(a.published.is_set() for a in agents):
            if time.monotonic() > deadline:
                raise TimeoutError("agents did not publish their slices")
            time.sleep(0.5)
        started = time.monotonic() - t0
        _wait_quiet(counter, 5, 120)  # start-up writes settle

        apiserver = tb.control_plane.apiserver
        assert apiserver is not None and apiserver.pid is not None
        with ProcSampler(apiserver.pid) as sampler:
            t1 = time.monotonic()
            time.sleep(args.idle)
            idle_counts = counter.take()
            idle = time.monotonic() - t1

        t2 = time.monotonic()
        for k in range(args.burst):
            _put_policy(admin, shared=k % 2 == 0)
            time.sleep(args.burst_gap)
        burst_counts = _wait_quiet(counter, 5, 120)
        burst = time.monotonic() - t2 - 5
        devices = [len(a.inventory.devices) for a in agents]
        return {
            "agents": args.agents,
            "profiles": profiles,
            "devices_per_node": statistics.median(devices),
            "start_to_all_published_s": round(started, 1),
            "idle": _rates(idle_counts, idle, args.agents),
            "idle_apiserver": sampler.report(),
            "burst": {
                "policy_changes": args.burst,
                **_rates(burst_counts, burst, args.agents),
                "per_node_per_change": round(
                    total(burst_counts, "agents") / args.agents / max(args.burst, 1), 2
                ),
            },
        }
    finally:
        for a in agents:
            a.request_stop()
        for a in agents:
            a.stop()
        stop.set()
        ctl_thread.join(15)
        _put_policy(admin, shared=False)


def controller_phase(tb: Testbed, args: argparse.Namespace, sample: Device) -> dict[str, Any]:
    nodes = [f"scale-{i:05d}" for i in range(args.scale_nodes)]
    status = _device_status(sample)
    clients = [tb.client(field_manager="bench") for _ in range(args.writers)]
    t0 = time.monotonic()
    deadline = t0 + args.create_seconds

    def put_node(i: int) -> None:
        clients[i % len(clients)].create(Node(metadata=ObjectMeta(name=nodes[i])))

    with futures.ThreadPoolExecutor(args.writers, thread_name_prefix="bench-put") as pool:
        list(pool.map(put_node, range(len(nodes))))
    nodes_s = time.monotonic() - t0
    created = 0
    lock = threading.Lock()

    def put_accelerator(i: int) -> None:
        nonlocal created
        if time.monotonic() > deadline:
            return
        node, dev = nodes[i // args.per_node], f"gpu-{i % args.per_node:02d}"
        _put_accelerator(clients[i % len(clients)], _accelerator(node, dev, dict(status)))
        with lock:
            created += 1

    wanted = min(args.accelerators, len(nodes) * args.per_node)
    with futures.ThreadPoolExecutor(args.writers, thread_name_prefix="bench-put") as pool:
        list(pool.map(put_accelerator, range(wanted)))
    create_s = time.monotonic() - t0 - nodes_s
    apiserver, etcd = tb.control_plane.apiserver, tb.control_plane.etcd
    assert apiserver is not None and apiserver.pid is not None
    assert etcd is not None and etcd.pid is not None
    rss_before = rss_bytes(apiserver.pid)
    for k in range(args.policies):  # each pass counts the Accelerators every policy selects
        _put_policy(clients[0], shared=True, name=f"{POLICY}-{k}")
    result: dict[str, Any] = {
        "nodes": len(nodes),
        "nodes_create_s": round(nodes_s, 1),
        "accelerators_wanted": wanted,
        "accelerators_created": created,
        "accelerators_create_s": round(create_s, 1),
        "accelerators_per_s": round(created / create_s, 1),
        "policies": args.policies,
        "apiserver_rss_mb_before_lists": round(rss_before / MB, 1),
    }
    trees = [("this", None)] + ([("compare", args.compare)] if args.compare else [])
    # Round k > 1 runs the trees in the other order (its keys end in _round<k>).
    runs = [
        (f"{label}_round{k}" if k > 1 else label, tree)
        for k in range(1, args.rounds + 1)
        for label, tree in (trees if k % 2 else trees[::-1])
    ]
    for label, tree in runs:
        env = dict(os.environ)
        if tree is not None:
            env["PYTHONPATH"] = tree
        cpu0 = cpu_seconds(apiserver.pid)
        out = subprocess.run(
            [sys.executable, __file__, "--controller-only", str(tb.kubeconfig)],
            env=env,
            check=True,
            capture_output=True,
            text=True,
            timeout=900,
        ).stdout
        result[f"controller_{label}"] = {
            **json.loads(out),
            "apiserver_cpu_s": round(cpu_seconds(apiserver.pid) - cpu0, 2),
        }
    result["apiserver_rss_mb_after"] = round(rss_bytes(apiserver.pid) / MB, 1)
    result["etcd_rss_mb"] = round(rss_bytes(etcd.pid) / MB, 1)
    return result


def _peak_rss() -> int:
    """This process's highest RSS so far (``VmHWM``), in bytes."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def controller_only(kubeconfig: Path) -> dict[str, Any]:
    """A fresh controller (in this process): time to list everything, three full passes."""
    import kubeacc

    ctl = Controller(
        Client(KubeConfig.from_file(kubeconfig), field_manager="kubeacc-controller"),
        identity="bench-scale",
        lease_namespace="default",
        lease_name="kubeacc-bench-scale",
    )
    rss_before = rss_bytes(os.getpid())
    t0 = time.monotonic()
    for c in ctl.caches:
        c.start()
    try:
        while not all(c.synced.is_set() for c in ctl.caches):
            if time.monotonic() - t0 > 600:
                raise TimeoutError("the controller's caches did not sync")
            time.sleep(0.05)
        list_s = time.monotonic() - t0
        passes = []
        for _ in range(3):
            t = time.monotonic()
            ctl.reconcile_once()
            passes.append(time.monotonic() - t)
        accelerators = ctl.accelerators.items()
        return {
            "code": str(Path(kubeacc.__file__).parent),
            "cached_accelerators": len(accelerators),
            "list_to_synced_s": round(list_s, 2),
            "pass_s": [round(p, 3) for p in passes],
            "controller_rss_mb_before_lists": round(rss_before / MB, 1),
            "controller_rss_mb": round(rss_bytes(os.getpid()) / MB, 1),
            "controller_peak_rss_mb": round(_peak_rss() / MB, 1),
            "cache_bytes_per_accelerator": round(deep_bytes(accelerators) / len(accelerators))
            if accelerators
            else 0,
        }
    finally:
        for c in ctl.caches:
            c.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--agents", type=int, default=100)
    ap.add_argument("--profiles", default="dgx-h100")
    ap.add_argument("--idle", type=float, default=120.0)
    ap.add_argument(
        "--rediscover",
        type=float,
        default=10.0,
        help="seconds between discovery passes (host work only: no request unless devices change)",
    )
    ap.add_argument("--burst", type=int, default=6)
    ap.add_argument("--burst-gap", type=float, default=2.0)
    ap.add_argument("--accelerators", type=int, default=80_000)
    ap.add_argument("--scale-nodes", type=int, default=5_000)
    ap.add_argument("--per-node", type=int, default=16)
    ap.add_argument("--create-seconds", type=float, default=240.0)
    ap.add_argument("--writers", type=int, default=8)
    ap.add_argument("--policies", type=int, default=3)
    ap.add_argument(
        "--compare", help="also measure the controller of the kubeacc package under this path"
    )
    ap.add_argument(
        "--rounds",
        type=int,
        default=1,
        help="fresh controllers per tree, alternating which tree goes first",
    )
    ap.add_argument("--controller-only", type=Path, help=argparse.SUPPRESS)  # kubeconfig
    args = ap.parse_args()
    if args.controller_only is not None:
        print(json.dumps(controller_only(args.controller_only)))
        return
    if args.agents < 1:
        ap.error("--agents must be at least 1")

    counter = RequestCounter(_component).install()
    logging.getLogger("kubeacc").setLevel(logging.ERROR)
    work = Path(tempfile.mkdtemp(prefix="kubeacc-bench-"))
    result: dict[str, Any] = {
        "benchmark": "agent_api_load",
        "load_1min_before": round(os.getloadavg()[0], 2),
    }
    tb = Testbed.start(with_kubelet=False)
    try:
        admin = tb.client(field_manager="kubeacc-bench")
        install_crds(admin)
        result["agents_phase"] = agents_phase(tb, args, counter, work)
        result["load_1min_after_agents"] = round(os.getloadavg()[0], 2)
        if args.accelerators > 0:
            sample = SyntheticHost(build("dgx-h100", work / "sample"))
            from kubeacc.discovery import discover

            gpu = next(d for d in discover(sample).devices if d.type.value == "gpu")
            result["controller_phase"] = controller_phase(tb, args, gpu)
            result["load_1min_after_controller"] = round(os.getloadavg()[0], 2)
        print(json.dumps(result, indent=2))
    finally:
        tb.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
