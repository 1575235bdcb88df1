"""Start of the long-running commands: modules imported, import time, start to registered, RSS.

Prints one JSON object. Targets (DESIGN.md, issue 30): start to registered <= 150 ms, steady RSS
<= 50 MB for the agent and the device plugin.

Each daemon is started as ``kubeacc <command>`` the way a node or a Deployment starts it:

- ``device-plugin`` on a synthetic 8-GPU server, with a kubelet stand-in (grpcio, not the
  plugin's own gRPC implementation) serving ``Registration`` on ``kubelet.sock``: start to
  registered is the time from ``Popen`` to the plugin's ``Register`` call arriving there;
- ``agent`` on the same host against a testbed control plane (real kube-apiserver, no kubelet):
  start to registered is the time until its registration socket answers the kubelet's
  ``GetInfo`` (the first thing the kubelet's plugin watcher asks);
- ``lifecycle-agent``, ``controller`` and ``extender`` against the same API server: start to
  ready is the time until their ``/readyz`` answers 200.

Per daemon: the modules it imported and their summed import time (a run under
``-X importtime``, stopped once ready), and over ``--runs`` plain runs the min / median start
time, the CPU time the process had used when it was ready (less sensitive to a busy machine
than the wall time) and the median RSS ``--settle`` seconds after it was ready; and from each
run's log, what its start-up freeze did (objects frozen, the time of one full garbage collection
before and after it: kubeacc/gcfreeze.py).

``--floor``: per daemon also the floor its libraries set, in the same run: a fresh
interpreter that imports only the modules the daemon imported that are not kube-acc's, and
one that imports nothing (wall time and RSS).

``--peers``: the device plugin and the agent beside their Go peers (bench/go_peers.py), starts
alternating in one run: the device plugin beside upstream's sample device plugin against the
same kubelet stand-in (both in the mount namespace the sample plugin needs), the agent beside
upstream's DRA test driver (its registration socket answers ``GetInfo``; same API server). The
JSON then has ``"<daemon> vs <peer>"`` entries: both sides, and the ratios kube-acc / peer of
the min and median start, the median CPU to registered and the median RSS.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from collections.abc import Callable, Iterator
from concurrent import futures
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import grpc
from dra_agent import compile_package, proc_status
from go_peers import SAMPLE_RESOURCE, TEST_DRIVER, in_plugin_dir, peer, test_driver_argv
from kubelet_client import stubs
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node

from kubeacc.crds.resources import install_crds
from kubeacc.node.kubeletapi import deviceplugin_v1beta1_pb2 as dpb
from kubeacc.node.kubeletapi import pluginregistration_v1_pb2 as rpb
from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from kubeacc.testbed.procs import cpu_seconds, free_port, terminate

NODE = "bench-node"
TARGET_START_MS = 150.0
TARGET_RSS_MB = 50.0


@dataclass
class Install:
    """The interpreter whose kube-acc the daemons run: this one (the checkout's install,
    editable when made by scripts/bootstrap.sh) unless ``--venv`` names another environment."""

    python: str = sys.executable


INSTALL = Install()


def _launcher(launcher: str) -> list[str]:
    """How the daemons start: ``entry``, the console script (their slim entry paths), or
    ``full_cli``: the whole interactive application, the way every daemon but the agent started
    before issue 30."""
    if launcher == "full_cli":
        return ["-m", "kubeacc.cli.main"]
    return [str(Path(INSTALL.python).parent / "kubeacc")]


_IMPORT = re.compile(r"^import time:\s+(\d+) \|\s+\d+ \|\s*(\S+)")
#: The line each daemon logs once it froze its start-up objects (kubeacc/gcfreeze.py).
_FROZEN = re.compile(
    r"(\d+) start-up objects frozen; a full garbage collection took ([\d.]+) ms before, "
    r"([\d.]+) ms after"
)


class KubeletStandIn:
    """The kubelet's Registration service on ``kubelet.sock``; remembers when Register came."""

    def __init__(self, plugin_dir: Path) -> None:
        self.arrived = threading.Event()
        self.at = 0.0
        #: What the plugin registered (its resource name).
        self.resource = ""
        #: The plugin's socket, relative to the plugin directory.
        self.endpoint = ""
        kubelet = self

        class Servicer(stubs("deviceplugin_v1beta1_pb2_grpc").RegistrationServicer):  # type: ignore[misc]
            def Register(self, request: dpb.RegisterRequest, context: object) -> dpb.Empty:
                kubelet.at = time.monotonic()
                kubelet.resource = request.resource_name
                kubelet.endpoint = request.endpoint
                kubelet.arrived.set()
                return dpb.Empty()

        self.server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        stubs("deviceplugin_v1beta1_pb2_grpc").add_RegistrationServicer_to_server(
            Servicer(), self.server
        )
        self.server.add_insecure_port(f"unix://{plugin_dir / 'kubelet.sock'}")
        self.server.start()

    def stop(self) -> None:
        self.server.stop(0)


def _answers_getinfo(sock: Path) -> bool:
    if not sock.exists():
        return False
    try:
        with grpc.insecure_channel(f"unix://{sock}") as ch:
            stub = stubs("pluginregistration_v1_pb2_grpc").RegistrationStub(ch)
            stub.GetInfo(rpb.InfoRequest(), timeout=1)
        return True
    except grpc.RpcError:
        return False


def _readyz(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as resp:
            return bool(resp.status == 200)
    except OSError:
        return False


@dataclass
class Daemon:
    """How to start one daemon in ``work`` and tell when it is registered / ready."""

    name: str
    args: Callable[[Path], list[str]]
    #: Given the work dir: (set-up before the start, ready check, clean-up).
    probe: Callable[[Path], tuple[Callable[[], bool], Callable[[], None]]]
    what: str
    #: The whole command line given the work dir (a Go peer), instead of ``kubeacc <name>``.
    command: Callable[[Path], list[str]] | None = None
    #: Runs the command line inside another (the mount namespace of ``in_plugin_dir``).
    wrap: Callable[[Path, list[str]], list[str]] | None = None


def _start(
    daemon: Daemon, work: Path, importtime: bool, launcher: str = "entry", timeout: float = 60
) -> tuple[subprocess.Popen[bytes], float, Callable[[], None], Path]:
    """Start ``daemon``; (process, ms to ready, clean-up, log file)."""
    work.mkdir(parents=True, exist_ok=True)
    ready, cleanup = daemon.probe(work)
    log = work / "daemon.log"
    cmd = _launcher(launcher)
    if importtime or cmd[0] == "-m":  # the console script is a Python script too
        cmd = [INSTALL.python, *(["-X", "importtime"] if importtime else []), *cmd]
    dropped = {"PYTHONDONTWRITEBYTECODE", "KUBECONFIG"}
    env = {k: v for k, v in os.environ.items() if k not in dropped}
    argv = daemon.command(work) if daemon.command else [*cmd, daemon.name, *daemon.args(work)]
    if daemon.wrap is not None:
        argv = daemon.wrap(work, argv)
    t0 = time.monotonic()
    with log.open("wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env=env)
    deadline = t0 + timeout
    while not ready():
        if time.monotonic() > deadline or proc.poll() is not None:
            proc.kill()
            cleanup()
            raise RuntimeError(f"{daemon.name} not ready:\n{log.read_text()[-3000:]}")
        time.sleep(0.002)
    return proc, (time.monotonic() - t0) * 1000, cleanup, log


def _cpu_ms(pid: int) -> float:
    """User + system CPU time of the process so far."""
    return cpu_seconds(pid) * 1000


def imports(log: Path) -> dict[str, object]:
    """Modules imported and their summed own import time, from ``-X importtime`` output."""
    own = [int(m[1]) for line in log.read_text().splitlines() if (m := _IMPORT.match(line))]
    return {"modules": len(own), "import_ms": round(sum(own) / 1000, 1)}


#: Imports ``MODULES`` (a JSON list, in order) in a fresh interpreter and prints its RSS.
_FLOOR = """
import importlib, json, sys
for name in json.loads(sys.argv[1]):
    try:
        importlib.import_module(name)
    except Exception:  # a module only importable as a side effect of another (or on Windows)
        pass
for line in open("/proc/self/status"):
    if line.startswith("VmRSS:"):
        print(int(line.split()[1]) / 1024)
"""


def library_floor(log: Path, runs: int) -> dict[str, object]:
    """What the daemon's libraries cost before any kube-acc code: a fresh interpreter that
    imports exactly the modules the daemon imported that are not kube-acc's (from its
    ``-X importtime`` log, in the same order), and one that imports nothing; wall time from
    ``Popen`` to exit and the RSS at the end, ``runs`` times alternating."""
    names = [m[2] for line in log.read_text().splitlines() if (m := _IMPORT.match(line))]
    libraries = [n for n in names if n != "kubeacc" and not n.startswith("kubeacc.")]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    cases = {"interpreter": "[]", "libraries": json.dumps(libraries)}
    times: dict[str, list[float]] = {k: [] for k in cases}
    rss: dict[str, list[float]] = {k: [] for k in cases}
    for _ in range(runs):
        for case, arg in cases.items():
            t0 = time.monotonic()
            out = subprocess.run(
                [INSTALL.python, "-c", _FLOOR, arg],
                capture_output=True,
                text=True,
                check=True,
                env=env,
                cwd="/",
            )
            times[case].append((time.monotonic() - t0) * 1000)
            rss[case].append(float(out.stdout.split()[-1]))
    return {
        "library_modules": len(libraries),
        **{
            f"{case}_{what}": round(f(v), 1)
            for case in cases
            for what, f, v in (
                ("min_ms", min, times[case]),
                ("median_ms", statistics.median, times[case]),
                ("rss_mb", statistics.median, rss[case]),
            )
        },
    }


def measure(
    daemon: Daemon,
    work: Path,
    runs: int,
    settle: float,
    launcher: str = "entry",
    floor: bool = False,
) -> dict[str, object]:
    work = work / launcher
    proc, _, cleanup, log = _start(daemon, work / "importtime", True, launcher)
    terminate(proc)
    cleanup()
    result: dict[str, object] = {**imports(log), "ready_means": daemon.what}
    if floor:
        result["floor"] = library_floor(log, runs)
    runs_of = _Runs()
    for n in range(runs):
        runs_of.run(daemon, work / f"run{n}", settle, launcher)
    return result | runs_of.summary()


class _Runs:
    """The plain runs of one daemon: start, CPU to ready, RSS, start-up freeze."""

    def __init__(self) -> None:
        self.starts: list[float] = []
        self.cpu: list[float] = []
        self.rss: list[float] = []
        self.frozen: list[list[float]] = []

    def run(self, daemon: Daemon, work: Path, settle: float, launcher: str = "entry") -> None:
        proc, ms, cleanup, log = _start(daemon, work, False, launcher)
        self.starts.append(ms)
        self.cpu.append(_cpu_ms(proc.pid))
        time.sleep(settle)
        self.rss.append(proc_status(proc.pid)["rss_mb"])
        if found := _FROZEN.search(log.read_text(errors="replace")):
            self.frozen.append([int(found[1]), float(found[2]), float(found[3])])
        terminate(proc)
        cleanup()

    def summary(self) -> dict[str, object]:
        starts = self.starts
        return {
            "start_ms": [round(s, 1) for s in starts],
            "start_min_ms": round(min(starts), 1),
            "start_median_ms": round(statistics.median(starts), 1),
            "start_cpu_ms": self.cpu,
            "start_cpu_median_ms": statistics.median(self.cpu),
            "rss_mb": self.rss,
            "rss_median_mb": statistics.median(self.rss),
            # Per run: [objects frozen, ms of a full GC before the freeze, ms of the first after].
            "gc_freeze": self.frozen,
        }


def measure_beside(
    ours: Daemon, peer_daemon: Daemon, work: Path, runs: int, settle: float
) -> dict[str, object]:
    """``ours`` and its Go peer, ``runs`` starts each, alternating (who goes first swaps)."""
    mine, theirs = _Runs(), _Runs()
    for n in range(runs):
        pair = [(ours, mine), (peer_daemon, theirs)]
        for daemon, runs_of in pair if n % 2 == 0 else reversed(pair):
            runs_of.run(daemon, work / daemon.name / f"run{n}", settle)
    a, b = mine.summary(), theirs.summary()

    def ratio(key: str) -> float:
        return round(float(a[key]) / float(b[key]), 2)  # type: ignore[arg-type]

    return {
        ours.name: {"ready_means": ours.what, **a},
        peer_daemon.name: {"ready_means": peer_daemon.what, **b},
        "ratio_start_min": ratio("start_min_ms"),
        "ratio_start_median": ratio("start_median_ms"),
        "ratio_start_cpu_median": ratio("start_cpu_median_ms"),
        "ratio_rss_median": ratio("rss_median_mb"),
    }


Probe = Callable[[Path], tuple[Callable[[], bool], Callable[[], None]]]


def _device_plugin_probe(resource: str) -> Probe:
    """Ready once ``Register`` of ``resource`` arrived at the kubelet stand-in in ``dp/``."""

    def probe(work: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
        (work / "dp").mkdir()
        kubelet = KubeletStandIn(work / "dp")

        def registered() -> bool:
            if kubelet.arrived.is_set() and kubelet.resource != resource:
                raise RuntimeError(f"registered {kubelet.resource!r}, not {resource!r}")
            return kubelet.arrived.is_set()

        return registered, kubelet.stop

    return probe


def _getinfo_probe(driver: str) -> Probe:
    """Ready once the driver's registration socket answers the kubelet's ``GetInfo``.

    The kubelet's registry directory and the driver's own directory under ``plugins/`` exist
    before the driver starts, as on a node (the kubelet makes the first, the DaemonSet's
    hostPath mount the second; the DRA test driver does not make them)."""

    def probe(work: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
        (work / "kubelet" / "plugins" / driver).mkdir(parents=True)
        (work / "kubelet" / "plugins_registry").mkdir()
        sock = work / "kubelet" / "plugins_registry" / f"{driver}-reg.sock"
        return lambda: _answers_getinfo(sock), lambda: None

    return probe


#: The daemons ``--peers`` measures beside a Go peer.
PEERED = ("device-plugin", "agent")


def beside_peers(host: Path, kubeconfig: Path) -> dict[str, tuple[Daemon, Daemon]]:
    """Per kube-acc daemon with a Go peer: (kube-acc's, the peer), started the same way."""
    [device_plugin, agent] = [d for d in daemons(host, kubeconfig) if d.name in PEERED]

    def namespaced(work: Path, argv: list[str]) -> list[str]:
        return in_plugin_dir(work / "dp", argv)

    device_plugin.wrap = namespaced
    sample = Daemon(
        "sample-device-plugin",
        lambda w: [],
        _device_plugin_probe(SAMPLE_RESOURCE),
        "Register arrived at the kubelet stand-in",
        command=lambda w: [str(peer("sample-device-plugin"))],
        wrap=namespaced,
    )
    driver = Daemon(
        "test-driver",
        lambda w: [],
        _getinfo_probe(TEST_DRIVER),
        "registration socket answers GetInfo",
        command=lambda w: test_driver_argv(kubeconfig, NODE, w / "kubelet", w / "cdi"),
    )
    return {"device-plugin": (device_plugin, sample), "agent": (agent, driver)}


def daemons(host: Path, kubeconfig: Path) -> list[Daemon]:
    device_plugin_probe = _device_plugin_probe("kubeacc.io/gpu")

    agent_probe = _getinfo_probe("kubeacc.io")

    ports: dict[Path, int] = {}

    def port(work: Path) -> int:
        if work not in ports:
            ports[work] = free_port()
        return ports[work]

    def http_probe(work: Path) -> tuple[Callable[[], bool], Callable[[], None]]:
        return lambda: _readyz(port(work)), lambda: None

    node = [f"--node-name={NODE}", f"--host-root={host}", f"--kubeconfig={kubeconfig}"]
    return [
        Daemon(
            "device-plugin",
            lambda w: [f"--host-root={host}", f"--plugin-dir={w / 'dp'}", "--type=gpu"],
            device_plugin_probe,
            "Register arrived at the kubelet stand-in",
        ),
        Daemon(
            "agent",
            lambda w: [
                *node,
                f"--kubelet-root={w / 'kubelet'}",
                f"--cdi-dir={w / 'cdi'}",
                f"--state-dir={w / 'state'}",
                f"--metrics-address=127.0.0.1:{port(w)}",
            ],
            agent_probe,
            "registration socket answers GetInfo",
        ),
        Daemon(
            "lifecycle-agent",
            lambda w: [
                *node,
                f"--bitstream-dir={w / 'bitstreams'}",
                f"--metrics-address=127.0.0.1:{port(w)}",
            ],
            http_probe,
            "/readyz 200",
        ),
        Daemon(
            "controller",
            lambda w: [
                f"--kubeconfig={kubeconfig}",
                f"--identity=bench-{w.name}",
                f"--metrics-address=127.0.0.1:{port(w)}",
            ],
            http_probe,
            "/readyz 200",
        ),
        Daemon(
            "extender",
            lambda w: [
                f"--kubeconfig={kubeconfig}",
                "--insecure-http",
                "--no-leader-elect",
                f"--address=127.0.0.1:{port(w)}",
            ],
            http_probe,
            "/readyz 200",
        ),
    ]


@contextmanager
def _cluster(with_api: bool) -> Iterator[Path | None]:
    if not with_api:
        yield None
        return
    with Testbed.start(with_kubelet=False) as tb:
        client = tb.client()
        client.create(Node(metadata=ObjectMeta(name=NODE)))
        install_crds(client)
        yield tb.kubeconfig


def _installed_from() -> str:
    """Where the daemons' interpreter finds kube-acc, and whether that install is editable."""
    probe = (
        "import importlib.metadata as m, kubeacc; "
        "d = m.distribution('kubeacc').read_text('direct_url.json') or ''; "
        "print(kubeacc.__file__, '(editable)' if '\"editable\": true' in d else '(installed)')"
    )
    out = subprocess.run(  # not from the checkout, whose own metadata would answer
        [INSTALL.python, "-c", probe], capture_output=True, text=True, check=True, cwd="/"
    )
    return out.stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=5)
    parser.add_argument("--settle", type=float, default=3.0, help="seconds before the RSS")
    parser.add_argument("--only", nargs="*", help="these daemons only")
    parser.add_argument(
        "--full-cli", action="store_true", help="also start each through the full application"
    )
    parser.add_argument(
        "--peers",
        action="store_true",
        help=f"only {' and '.join(PEERED)}, each beside its Go peer, starts alternating",
    )
    parser.add_argument(
        "--floor",
        action="store_true",
        help="also time a fresh interpreter importing only the daemon's libraries (the "
        "modules it imports that are not kube-acc's), and one importing nothing",
    )
    parser.add_argument(
        "--venv",
        type=Path,
        help="start the kube-acc installed in this virtual environment (made as the image makes "
        "it: python -m venv V && V/bin/pip install .) instead of this interpreter's; an "
        "editable install's import finder adds to every start",
    )
    args = parser.parse_args()
    if args.venv is not None:
        INSTALL.python = str(args.venv.absolute() / "bin" / "python")
    if args.peers:
        args.only = [d for d in args.only or PEERED if d in PEERED]
        for name in ("sample-device-plugin", "test-driver"):
            peer(name)  # build (or find) them before anything is timed
    compile_package()
    with tempfile.TemporaryDirectory(prefix="kubeacc-start-") as tmp:
        work = Path(tmp)
        host = profiles.build("dgx-h100", work / "host")
        chosen = [d.name for d in daemons(host, Path()) if not args.only or d.name in args.only]
        with _cluster(chosen != ["device-plugin"]) as kubeconfig:
            result: dict[str, object] = {
                "benchmark": "daemon_start",
                "load_1min": round(os.getloadavg()[0], 2),
                "runs": args.runs,
                "target_start_ms": TARGET_START_MS,
                "target_rss_mb": TARGET_RSS_MB,
                "kubeacc_from": _installed_from(),
            }
            if args.peers:
                pairs = beside_peers(host, kubeconfig or Path())
                for name in chosen:
                    ours, theirs = pairs[name]
                    result[f"{name} vs {theirs.name}"] = measure_beside(
                        ours, theirs, work / name, args.runs, args.settle
                    )
            for d in [] if args.peers else daemons(host, kubeconfig or Path()):
                if d.name in chosen:
                    result[d.name] = measure(
                        d, work / d.name, args.runs, args.settle, floor=args.floor
                    )
                    if args.full_cli:
                        result[f"{d.name} (full_cli)"] = measure(
                            d, work / d.name, args.runs, args.settle, "full_cli"
                        )
            result["load_1min_after"] = round(os.getloadavg()[0], 2)
    print(json.dumps(result, indent=2))


if __name__ == "__main__":
    main()
