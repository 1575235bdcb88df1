"""kubeacc extender under hostile input: sizes, depths, shapes, concurrent binds, slow clients.

Prints one JSON object. The extender serves a synthetic 5,000-node cluster (bench/extender.py's
state) from its own process, over mutual TLS as the chart runs it; the bench is kube-scheduler
(its client certificate) and, for the hostile parts, whoever else reaches the port (no
certificate; or kube-scheduler's certificate gone wrong, which is the worst case). Binds go
to an in-memory binder (no API server: the HTTP side is what is measured).

``rss_mib``: the extender's resident memory before the attacks, at its peak (VmHWM) and after.
``request_bytes_5000_nodes``: the body kube-scheduler sends to a node-cache-capable extender
for a 5,000-node cluster (the pod plus every node name) with 45-character names (as cloud
providers name nodes) and with the longest names Kubernetes allows (253): what MAX_BODY is
sized for. Each scenario: the answers by status code and the seconds it took; the legitimate
filter's latency while slow clients hold the port; ``server_errors`` (5xx other than 503):
must be 0. All traffic is on 127.0.0.1, bounded in count and time.
"""

from __future__ import annotations

import argparse
import http.client
import json
import multiprocessing
import random
import ssl
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

from extender import PODS, build_state  # bench/extender.py (run from the repository root)

from kubeacc.contracts.wants import PREFER_ANNOTATION, Decision
from kubeacc.extender.server import MAX_BODY, ExtenderServer
from kubeacc.extender.service import Extender
from kubeacc.gcfreeze import freeze_periodically
from kubeacc.netserve.tls import ReloadingContext
from kubeacc.testbed.extendertls import ExtenderPKI, issue_extender_pki
from kubeacc.testbed.slowclients import SlowClients


class MemoryBinder:
    """Pods by name; decisions and bindings kept in memory."""

    def __init__(self, pods: dict[str, dict[str, Any]]) -> None:
        self.pods = pods
        self.bound = 0

    def get_pod(self, namespace: str, name: str) -> dict[str, Any]:
        return self.pods[name]

    def record(self, namespace: str, name: str, uid: str, decision: Decision) -> None:
        pass

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        self.bound += 1


def _rss(pid: int) -> dict[str, float]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = round(int(value.split()[0]) / 1024, 1)
    return fields


def _serve(nodes: int, pki: ExtenderPKI, pods: dict[str, dict[str, Any]], conn: Connection) -> None:
    state = build_state(nodes, 17)
    freeze_periodically(threading.Event())
    ext = Extender(state, MemoryBinder(pods))
    server = ExtenderServer(ext, "127.0.0.1", 0, tls=ReloadingContext(pki.server_files))
    server.start()
    conn.send((server.port, sorted(state.nodes)))
    conn.recv()
    conn.send(dict(server.httpd.counts, reaped=server.httpd.reaper.reaped))
    server.stop()


class Client:
    def __init__(self, port: int, ctx: ssl.SSLContext) -> None:
        self.port = port
        self.ctx = ctx

    def post(self, path: str, body: bytes, length: str | None = None) -> int:
        conn = http.client.HTTPSConnection("127.0.0.1", self.port, context=self.ctx, timeout=60)
        try:
            conn.putrequest("POST", path)
            if length != "":
                conn.putheader("Content-Length", length or str(len(body)))
            conn.endheaders()
            if length is None or length == str(len(body)):
                conn.send(body)
            r = conn.getresponse()
            r.read()
            return int(r.status)
        except (OSError, http.client.HTTPException):
            return 0  # the server closed the connection
        finally:
            conn.close()


def _run(name: str, jobs: list[Callable[[], int]], threads: int) -> dict[str, Any]:
    codes: Counter[int] = Counter()
    lock = threading.Lock()
    queue = list(jobs)
    start = time.monotonic()

    def worker() -> None:
        while True:
            with lock:
                if not queue:
                    return
                job = queue.pop()
            code = job()
            with lock:
                codes[code] += 1

    pool = [threading.Thread(target=worker) for _ in range(threads)]
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    return {
        "requests": len(jobs),
        "codes": {str(k): v for k, v in sorted(codes.items())},
        "seconds": round(time.monotonic() - start, 2),
    }


def _nested(depth: int) -> bytes:
    return b'{"Pod": ' + b"[" * depth + b"]" * depth + b"}"


def _wide_lists(size: int) -> bytes:
    """The densest JSON for memory: empty lists, ~25x their text once decoded."""
    n = (size - 40) // 3
    return b'{"Pod": {}, "NodeNames": null, "X": [' + b"[]," * (n - 1) + b"[]]}"


def _shapes(rng: random.Random, names: list[str]) -> list[bytes]:
    values: list[Any] = [None, 1, -1, 1.5, "x", [], {}, [1], {"a": 1}, True, "a" * 1000]
    out = []
    for _ in range(300):
        pod: Any = rng.choice([*values, PODS["share_8gib"]])
        body = {"Pod": pod, "NodeNames": rng.choice([*values, names[:10]])}
        if isinstance(pod, dict) and "spec" in pod and rng.random() < 0.5:
            pod = json.loads(json.dumps(pod))
            pod["spec"]["containers"][0]["resources"] = rng.choice(values)
            body["Pod"] = pod
        out.append(json.dumps(body).encode())
    return out


def request_sizes(nodes: int) -> dict[str, int]:
    pod = PODS["share_8gib"]
    out = {}
    for label, width in (("names_45_chars", 45), ("names_253_chars", 253)):
        names = [f"{i:05d}".rjust(width, "n") for i in range(nodes)]
        out[label] = len(json.dumps({"Pod": pod, "Nodes": None, "NodeNames": names}).encode())
    out["limit"] = MAX_BODY
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--slow", type=int, default=300, help="slow clients held at once")
    ap.add_argument("--slow-seconds", type=float, default=15.0)
    args = ap.parse_args()
    rng = random.Random(23)
    pki = issue_extender_pki(Path(tempfile.mkdtemp(prefix="kacc-fuzz-")))
    pods = {f"b{i}": json.loads(json.dumps(PODS["share_8gib"])) for i in range(64)}
    for name, p in pods.items():
        p["metadata"]["name"] = name
        p["metadata"]["uid"] = f"uid-{name}"
    parent, child = multiprocessing.Pipe()
    proc = multiprocessing.get_context("fork").Process(
        target=_serve, args=(args.nodes, pki, pods, child)
    )
    proc.start()
    port, names = parent.recv()
    assert proc.pid is not None
    sched = ssl.create_default_context(cafile=str(pki.ca))
    sched.load_cert_chain(pki.client.cert, pki.client.key)
    stranger = ssl.create_default_context(cafile=str(pki.ca))
    ok, anon = Client(port, sched), Client(port, stranger)
    filter_body = json.dumps({"Pod": PODS["share_8gib"], "NodeNames": names}).encode()
    ok.post("/filter", filter_body)  # warm
    result: dict[str, Any] = {
        "benchmark": "extender_hostile_input",
        "nodes": args.nodes,
        "request_bytes_5000_nodes": request_sizes(5000),
    }
    rss_before = _rss(proc.pid)["VmRSS"]
    scenarios: dict[str, Any] = {}

    def post(client: Client, body: bytes, length: str | None = None) -> Callable[[], int]:
        return lambda: client.post("/filter", body, length)

    scenarios["no_client_certificate_bind"] = _run(
        "anon", [lambda: anon.post("/bind", b'{"PodName":"b1","Node":"node-00001"}')] * 50, 8
    )
    scenarios["content_length"] = _run(
        "cl",
        [post(ok, b"", v) for v in ("-1", "", "abc", str(63 << 20), str(MAX_BODY + 1))] * 10,
        8,
    )
    big = _wide_lists(MAX_BODY)
    scenarios["sizes_4mib_densest_json_x16_concurrent"] = _run("big", [post(ok, big)] * 32, 16)
    scenarios["sizes_63mib_declared"] = _run(
        "63", [post(ok, b"{" + b" " * (1 << 20), str(63 << 20))] * 8, 8
    )
    scenarios["depths"] = _run(
        "depth", [post(ok, _nested(d)) for d in (33, 100, 1000, 100_000, 1_000_000)] * 4, 4
    )
    scenarios["shapes"] = _run("shapes", [post(ok, b) for b in _shapes(rng, names)], 8)
    prefer = json.loads(json.dumps(PODS["whole_1_prefer"]))
    prefer["metadata"]["annotations"][PREFER_ANNOTATION] = ",".join(
        f"model-{i}" for i in range(20_000)
    )
    prefer_body = json.dumps({"Pod": prefer, "NodeNames": names}).encode()
    t0 = time.perf_counter()
    scenarios["prefer_models_20000_names"] = _run("prefer", [post(ok, prefer_body)] * 20, 1)
    scenarios["prefer_models_20000_names"]["ms_per_request"] = round(
        (time.perf_counter() - t0) * 1000 / 20, 1
    )
    binds = [
        (
            lambda n=n: ok.post(
                "/bind",
                json.dumps(
                    {
                        "PodName": n,
                        "PodNamespace": "bench",
                        "PodUID": f"uid-{n}",
                        "Node": "node-00007",
                    }
                ).encode(),
            )
        )
        for n in pods
    ]
    scenarios["concurrent_binds_64"] = _run("binds", binds, 64)

    latencies = []
    codes: Counter[int] = Counter()
    # stalled in the TLS handshake, a byte of a TLS record now and then
    with SlowClients(port, args.slow, drip=b"\x16") as slow:
        time.sleep(1.0)
        end = time.monotonic() + args.slow_seconds - 2
        while time.monotonic() < end:
            t = time.perf_counter()
            codes[ok.post("/filter", filter_body)] += 1
            latencies.append((time.perf_counter() - t) * 1000)
    latencies.sort()
    scenarios["slow_clients"] = {
        "held_at_once": args.slow,
        "opened": slow.opened,
        "legit_filter_codes": {str(k): v for k, v in codes.items()},
        "legit_filter_p50_ms_new_tls_connection": round(latencies[len(latencies) // 2], 1),
        "legit_filter_p99_ms_new_tls_connection": round(
            latencies[min(len(latencies) - 1, int(len(latencies) * 0.99))], 1
        ),
    }
    time.sleep(1.0)
    rss = _rss(proc.pid)
    parent.send("counts")
    result["server_counts"] = parent.recv()
    proc.join(30)
    result["rss_mib"] = {"before": rss_before, "peak": rss["VmHWM"], "after": rss["VmRSS"]}
    result["chart_limit_mib"] = 512
    result["scenarios"] = scenarios
    errors = sum(
        v
        for s in scenarios.values()
        for k, v in (s.get("codes") or s.get("legit_filter_codes") or {}).items()
        if k.startswith("5") and k != "503"
    )
    result["server_errors"] = errors
    result["within_limit"] = rss["VmHWM"] < 512 and errors == 0
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
