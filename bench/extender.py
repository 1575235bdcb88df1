"""kubeacc extender: filter + prioritize latency per pod at 500 and 5,000 nodes.

Prints one JSON object. Target (DESIGN.md, issue 30): p99 <= 10 ms at 5,000 nodes. Each node is
the dgx-h100 synthetic host (8 H100 80GB, 2 NUMA nodes); a seeded random third of the GPUs carry
shares and a fifth are held whole, so nodes differ. The extender serves from its own process;
the verbs are called over HTTP on loopback, one keep-alive connection (TCP_NODELAY, as Go's
client), with the body kube-scheduler sends for a node-cache-capable extender (the pod plus
every candidate node name). ``p50_ms``/``p99_ms``: request sent to answer parsed, filter and
prioritize of the same pod added up. ``server_cpu_p50_ms``/``server_cpu_p99_ms``: CPU time the
extender process spent on the two calls (unlike wall time, not inflated by other processes on a
busy machine); ``server_wall_p50_ms``/``server_wall_p99_ms``: the time the two calls spent in
the extender's handler (request head read to answer written), without the client's own work and
the hand-offs. The client encodes and decodes JSON with msgspec, compact, as kube-scheduler's Go
client does (the standard library's ``json`` took ~1 ms of each pair's wall time, and its
separators with spaces are not what the scheduler sends). Pods: a memory share, a memory+core
share, a share with a model wish, 1 and 4 whole GPUs; each asked again and again, as the
replicas of a Deployment are (the nodes' memo of answers is warm), and ``share_cold``: a share
of a new size every round (cold); ``units_2000``: 2,000 normalized units (3 H100s),
``whole_1_prefer``: 1 whole GPU with a model ranking (``B200,H100,*``). ``--pods`` measures only
the named ones. Nothing changes between the rounds unless ``--churn``: then after each pair the
pod is placed on the node prioritize scored best and its GPUs reserved, as the bind of a
Deployment's replica does, so the next replica's kept whole answers (``kept_answers_given``)
are given only where that node's answer for it stayed the same, or mended for the nodes that
changed (``derived_answers_given``: prioritize's answer for filter's new list derived from the
one kept for the previous list).
"""

from __future__ import annotations

import argparse
import contextlib
import http.client
import json
import multiprocessing
import os
import random
import socket
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, HTTPServer
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import msgspec

from kubeacc.contracts.wants import (
    CORES,
    GPU,
    MEMORY,
    MODELS_ANNOTATION,
    PREFER_ANNOTATION,
    UNITS,
    Assigned,
    Decision,
    pod_want,
)
from kubeacc.discovery import discover
from kubeacc.extender.server import ExtenderServer
from kubeacc.extender.service import BindError, Extender
from kubeacc.extender.state import State, gpu_of
from kubeacc.gcfreeze import freeze_periodically
from kubeacc.model import DeviceType
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost

#: p99 of filter + prioritize at 5,000 nodes, wall (DESIGN.md).
TARGET_MS = 10


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return round(ordered[min(len(ordered) - 1, round(q * (len(ordered) - 1)))], 3)


def _pod(name: str, limits: dict[str, str], notes: dict[str, str] | None = None) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "name": name,
            "namespace": "bench",
            "uid": f"uid-{name}",
            "labels": {"app": "bench", "tier": "inference"},
            "annotations": notes or {},
        },
        "spec": {
            "schedulerName": "default-scheduler",
            "containers": [
                {
                    "name": "main",
                    "image": "registry.example/infer:1.0",
                    "command": ["python", "-m", "serve", "--port", "8000"],
                    "resources": {"limits": {"cpu": "4", "memory": "16Gi", **limits}},
                    "env": [{"name": f"VAR_{i}", "value": "x" * 16} for i in range(10)],
                }
            ],
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists"}],
        },
        "status": {"phase": "Pending"},
    }


PODS = {
    "share_8gib": _pod("share", {MEMORY: "8192"}),
    "share_cold": _pod("share-cold", {MEMORY: "8192"}),
    "share_8gib_30pct": _pod("share-cores", {MEMORY: "8192", CORES: "30"}),
    "share_model_wish": _pod("share-wish", {MEMORY: "8192"}, {MODELS_ANNOTATION: "h100-80gb-hbm3"}),
    "whole_1": _pod("whole-1", {GPU: "1"}),
    "whole_4": _pod("whole-4", {GPU: "4"}),
    "units_2000": _pod("units", {UNITS: "2000"}),
    "whole_1_prefer": _pod("prefer", {GPU: "1"}, {PREFER_ANNOTATION: "B200,H100,*"}),
}


def build_state(nodes: int, seed: int) -> State:
    host = profiles.build("dgx-h100", Path(tempfile.mkdtemp(prefix="kubeacc-bench-")) / "h")
    devices = [d for d in discover(SyntheticHost(host)).devices if d.type is DeviceType.GPU]
    rng = random.Random(seed)
    state = State()
    gpus = [g for g in (gpu_of(d) for d in devices) if g is not None]
    state.set_inventory({f"node-{i:05d}": list(gpus) for i in range(nodes)})
    pods = []
    for i in range(nodes):
        node = f"node-{i:05d}"
        assigned = []
        for n, g in enumerate(gpus):
            r = rng.random()
            if r < 0.2:
                assigned.append(Assigned(f"w{n}", (g.bdf,), whole=True))
            elif r < 0.55:
                mem = rng.choice([4096, 8192, 16384, 40960, 65536, 78000])
                assigned.append(Assigned(f"s{n}", (g.bdf,), memory=mem, cores=rng.choice([0, 30])))
        if assigned:
            decision = Decision(node, tuple(assigned))
            pods.append(
                {
                    "metadata": {
                        "uid": f"held-{i}",
                        "annotations": {"kubeacc.io/devices": decision.to_json()},
                    },
                    # the containers ask for what the decision gives: a decision that does
                    # not match its pod's requests is not counted (kubeacc/contracts/trusted.py)
                    "spec": {"nodeName": node, "containers": [_asking(a) for a in assigned]},
                    "status": {"phase": "Running"},
                }
            )
    state.set_pods(pods)
    held = len(state.allocs)
    if held != len(pods):
        raise RuntimeError(f"only {held} of {len(pods)} holding pods counted")
    return state


def _asking(a: Assigned) -> dict[str, Any]:
    """The container that asks for exactly what ``a`` gives it."""
    limits = {GPU: "1"} if a.whole else {MEMORY: str(a.memory), CORES: str(a.cores)}
    return {"name": a.container, "resources": {"limits": limits}}


def place_replica(extender: Extender, body: bytes) -> None:
    """What binding a replica does to the state: the pod (``body``: {"Pod", "Node"}) is
    placed on the node and its decision reserved, as the bind verb does before it writes."""
    args = _decode(body)
    pod = args["Pod"]
    with contextlib.suppress(BindError):  # taken since: nothing to reserve
        extender.decide(pod, pod_want(pod), args["Node"])


def _serve(nodes: int, seed: int, port: Connection) -> None:
    """Child process: the extender over the synthetic cluster, until the parent goes."""
    state = build_state(nodes, seed)
    freeze_periodically(threading.Event())  # as ExtenderRunner does
    extender = Extender(state)
    server = ExtenderServer(extender, "127.0.0.1", 0)
    handler = server.httpd.RequestHandlerClass
    post = handler.do_POST  # type: ignore[attr-defined]
    spent = [0.0]  # seconds in the handler, all requests so far

    def timed_post(self: Any) -> None:
        t0 = time.perf_counter()
        try:
            post(self)
        finally:
            spent[0] += time.perf_counter() - t0

    handler.do_POST = timed_post  # type: ignore[attr-defined]
    server.start()

    class Cpu(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        disable_nagle_algorithm = True

        def do_GET(self) -> None:
            kept = extender.counts.get("answers_kept_given", 0)  # 0: a build without them
            derived = extender.counts.get("answers_derived", 0)
            body = f"{time.process_time()!r} {spent[0]!r} {kept} {derived}".encode()
            self.send_response(200)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_POST(self) -> None:
            place_replica(extender, self.rfile.read(int(self.headers["Content-Length"])))
            self.do_GET()

        def log_message(self, format: str, *args: Any) -> None:
            pass

    meter = HTTPServer(("127.0.0.1", 0), Cpu)
    threading.Thread(target=meter.serve_forever, daemon=True).start()
    port.send((server.port, meter.server_address[1], sorted(state.nodes)))
    port.recv()  # anything (or EOF): stop
    meter.shutdown()
    server.stop()


def _cpu(conn: http.client.HTTPConnection, bind: bytes = b"") -> tuple[float, float, int, int]:
    """The extender's CPU seconds, its handler's seconds, the kept answers it gave so far and
    how many of them prioritize derived from a kept answer of other names (after placing a
    replica first, ``bind``: {"Pod", "Node"})."""
    if bind:
        conn.request("POST", "/bind", bind)
    else:
        conn.request("GET", "/cpu")
    cpu, handler, kept, derived = conn.getresponse().read().split()
    return float(cpu), float(handler), int(kept), int(derived)


_encode = msgspec.json.encode
_decode = msgspec.json.decode


def measure(nodes: int, rounds: int, seed: int, churning: bool = False) -> dict[str, Any]:
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(target=_serve, args=(nodes, seed, child))
    proc.start()
    port, meter_port, names = parent.recv()
    meter = http.client.HTTPConnection("127.0.0.1", meter_port)
    conn = http.client.HTTPConnection("127.0.0.1", port)
    conn.connect()
    assert conn.sock is not None
    conn.sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)  # as Go's net/http does
    out: dict[str, Any] = {}
    try:
        for label, pod in PODS.items():
            cold = label.endswith("_cold")
            body = _encode({"Pod": pod, "NodeNames": names, "Nodes": None})
            times: list[float] = []
            cpu: list[float] = []
            inside: list[float] = []
            passed = 0
            kept_given = 0
            derived = 0
            for r in range(rounds + 3):
                if cold:  # a size no node has answered yet: nothing memoized
                    pod["spec"]["containers"][0]["resources"]["limits"][MEMORY] = str(8192 + r)
                    body = _encode({"Pod": pod, "NodeNames": names, "Nodes": None})
                c0 = _cpu(meter)
                t0 = time.perf_counter()
                conn.request("POST", "/filter", body, {"Content-Type": "application/json"})
                filtered = _decode(conn.getresponse().read())
                kept = filtered["NodeNames"]
                prio = _encode({"Pod": pod, "NodeNames": kept, "Nodes": None})
                conn.request("POST", "/prioritize", prio, {"Content-Type": "application/json"})
                scores = _decode(conn.getresponse().read())
                t1 = time.perf_counter()
                c1 = _cpu(meter)
                if churning and scores:  # the replica is bound to the best node
                    best = max(scores, key=lambda h: h["Score"])["Host"]
                    replica = {**pod, "metadata": {**pod["metadata"], "uid": f"{label}-{r}"}}
                    _cpu(meter, _encode({"Pod": replica, "Node": best}))
                if r >= 3:  # warm-up rounds are not counted
                    times.append((t1 - t0) * 1000)
                    cpu.append((c1[0] - c0[0]) * 1000)
                    inside.append((c1[1] - c0[1]) * 1000)
                    kept_given += c1[2] - c0[2]
                    derived += c1[3] - c0[3]
                passed = len(kept)
            out[label] = {
                "p50_ms": _pct(times, 0.5),
                "p99_ms": _pct(times, 0.99),
                "server_cpu_p50_ms": _pct(cpu, 0.5),
                "server_cpu_p99_ms": _pct(cpu, 0.99),
                "server_cpu_mean_ms": round(sum(cpu) / len(cpu), 3),
                "server_wall_p50_ms": _pct(inside, 0.5),
                "server_wall_p99_ms": _pct(inside, 0.99),
                "feasible_nodes": passed,
                "kept_answers_given": kept_given,
                "derived_answers_given": derived,
            }
    finally:
        conn.close()
        meter.close()
        parent.send("stop")
        proc.join(30)
    return out


def beside_hami(nodes: int, rounds: int, seed: int, churning: bool, runs: int) -> dict[str, Any]:
    """kube-acc's extender and HAMi's at ``nodes`` nodes, alternating, ``runs`` runs each."""
    from extender_hami import HamiPeer  # bench/ is the script's directory

    with HamiPeer(nodes) as peer:
        out: dict[str, Any] = {"hami_populate_s": round(peer.populate_s, 1), "runs": []}
        for _ in range(runs):
            load = os.getloadavg()[0]
            ours = measure(nodes, rounds, seed, churning)
            hami = peer.measure(rounds)
            out["runs"].append(
                {
                    "load_1min": [round(load, 2), round(os.getloadavg()[0], 2)],
                    "kubeacc": ours,
                    "hami": hami,
                }
            )
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, nargs="+", default=[500, 5000])
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--pods", nargs="+", choices=list(PODS), help="only these pods")
    ap.add_argument(
        "--churn",
        action="store_true",
        help="place each pod on its best node after its pair, as binding a replica does",
    )
    ap.add_argument(
        "--peer",
        choices=["hami"],
        help="also measure HAMi's extender (bench/extender_hami.py) at each node count, "
        "alternating with kube-acc's, --runs times each",
    )
    ap.add_argument("--runs", type=int, default=1, help="runs of each (with --peer)")
    args = ap.parse_args()
    for label in set(PODS) - set(args.pods or PODS):
        del PODS[label]
    result: dict[str, Any] = {
        "benchmark": "extender_filter_prioritize",
        "target_p99_ms_5000": TARGET_MS,
        "churn": args.churn,
    }
    if args.peer == "hami":
        result["peer"] = "hami"
        for n in args.nodes:
            result[f"nodes_{n}"] = beside_hami(n, args.rounds, args.seed, args.churn, args.runs)
            print(json.dumps({f"nodes_{n}": result[f"nodes_{n}"]}), file=sys.stderr, flush=True)
        print(json.dumps(result, indent=2))
        return
    for n in args.nodes:
        result[f"nodes_{n}"] = measure(n, args.rounds, args.seed, args.churn)
    worst = max(v["p99_ms"] for v in result.get("nodes_5000", {"x": {"p99_ms": 0}}).values())
    result["worst_p99_ms_5000"] = worst
    result["meets_target"] = worst <= TARGET_MS if "nodes_5000" in result else None
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
