"""The fault runner's nodes on the real container runtime (containerd + runc).

A node named in ``Config.runtimes`` as ``containerd`` runs its kubelet on the testbed's real
runtime (``KubeletOptions(runtime="containerd")``, kubeacc/testbed/runtime.py): the workload's
pods really run there and containerd applies the agent's CDI specs. What that node needs:

- the agent writes its CDI specs where containerd reads them (the kubelet's ``cdi_dir``) and
  points their ``hostPath`` at a device root of real character devices (:func:`setup`: one
  ``mknod`` for every device node of the synthetic host and every ``nvidia-cap`` minor a MIG
  instance can get, with the numbers of ``/dev/null``);
- the workload's pods (:func:`claim_pod`, :func:`resource_pod`, valid on both runtimes) run
  :data:`PROBE`: the container prints its own container ID (from its cgroup), its environment
  and every character device under its ``/dev``, then sleeps. :func:`container_violations` reads
  that report from the pod's log and holds it to the claim: a Running pod's current container
  (the ID in the pod's status) must have said ``KUBEACC_CLAIM=<ns>/<claim>``, one
  ``KUBEACC_DEVICE_<NAME>`` for each device the claim's allocation names on the node, every
  variable of the claim's CDI spec and each of its device nodes;
- the faults as they are on a real node: ``runtime-restart`` (:func:`restart`) SIGKILLs
  containerd and starts it again under the running kubelet: the shims and containers keep
  running, so every container is the same one afterwards (same container IDs, restart counts
  unchanged, same devices) and no claim is unprepared; ``node-reboot`` and ``power-loss``
  (:func:`power_off`) kill every process of the runtime (containerd, the shims, every process
  of every container, by their cgroups) and clear the runtime's ``/run`` state (containerd's
  state directory, runc's, the pods' network namespaces and root file system mounts) as a
  reboot does; its ``/var/lib`` (images, snapshots, CNI leases) stays. The kubelet, started
  again, makes every pod's sandbox and container again, their devices injected again from the
  specs the agent writes again.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.resources import as_dict
from kubeacc.node import cdi
from kubeacc.synthetic.mig_hw import cap_minor
from kubeacc.testbed import Testbed
from kubeacc.testbed.images import WORKLOAD_IMAGE
from kubeacc.testbed.kubelet import Kubelet, KubeletOptions, make_device_nodes
from tests.faults.invariants import ClusterView, Tracker, Violation, claim_names

if TYPE_CHECKING:
    from tests.faults.faults import Node

CONTAINERD = "containerd"
FAKE = "fake"
RUNTIMES = (FAKE, CONTAINERD)
#: The workload container's name.
CONTAINER = "main"
#: What the workload's container runs: its report between BEGIN and END, then it sleeps.
PROBE = (
    "echo BEGIN; "
    "echo ID $(grep -o 'k8s.io/[0-9a-f]*' /proc/self/cgroup | head -1 | cut -d/ -f2); "
    "env | sed 's/^/ENV /'; "
    "find /dev -type c | sed 's/^/DEV /'; "
    "echo END; exec sleep 1000000"
)
#: nvidia-cap minors made under the device root: every GPU instance and compute instance of
#: the first eight GPUs (kubeacc.synthetic.mig_hw), and ``config``/``monitor`` (1, 2).
CAP_MINORS = range(1, cap_minor(8, 0))


def _pod(name: str, ns: str, spec: dict[str, Any], resources: dict[str, Any]) -> Any:
    container = {
        "name": CONTAINER,
        "image": WORKLOAD_IMAGE,  # imported into containerd; the fake runtime takes any
        "imagePullPolicy": "IfNotPresent",
        "command": ["sh", "-c", PROBE],
        "resources": resources,
    }
    return from_dict(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": ns},
            "spec": {
                "terminationGracePeriodSeconds": 0,
                "automountServiceAccountToken": False,
                **spec,
                "containers": [container],
            },
        }
    )


def claim_pod(name: str, ns: str, claim_name: str) -> Any:
    """The workload's pod for the ResourceClaim ``claim_name`` (runs :data:`PROBE`)."""
    claims = {"resourceClaims": [{"name": "acc", "resourceClaimName": claim_name}]}
    return _pod(name, ns, claims, {"claims": [{"name": "acc"}]})


def resource_pod(name: str, ns: str, resources: dict[str, str]) -> Any:
    """The workload's pod asking for extended resources (runs :data:`PROBE`)."""
    return _pod(name, ns, {}, {"limits": resources})


def check_runtimes(runtimes: dict[str, str], nodes: dict[str, str]) -> None:
    """ValueError for a runtime not known or a node not in the run."""
    if bad := sorted(r for r in set(runtimes.values()) if r not in RUNTIMES):
        raise ValueError(f"unknown runtimes {', '.join(bad)} (known: {', '.join(RUNTIMES)})")
    if unknown := sorted(set(runtimes) - set(nodes)):
        raise ValueError(f"runtimes name nodes not in the run: {', '.join(unknown)}")


def setup(kubelet: Kubelet, host: Path, node: Node) -> tuple[str, ...]:
    """Ready ``node``'s agent for the real runtime: its CDI specs where containerd reads them,
    the host's device nodes made for real; the agent flags that point its specs at them."""
    if kubelet.containerd is None:
        raise ValueError(f"node {kubelet.node_name} is not on containerd in this testbed")
    node.agent.cdi_dir = kubelet.cdi_dir
    node.real_runtime = True
    dev = host / "dev"
    paths = {f"/dev/{p.relative_to(dev)}" for p in dev.rglob("*") if not p.is_dir()}
    paths |= {f"/dev/nvidia-caps/nvidia-cap{m}" for m in CAP_MINORS}
    make_device_nodes(kubelet.device_root, sorted(paths))
    return (f"--device-root={kubelet.device_root}",)


def kubelet_options(nodes: dict[str, str], runtimes: dict[str, str]) -> list[KubeletOptions]:
    """The testbed's kubelets for a run's nodes, each on its runtime."""
    check_runtimes(runtimes, nodes)
    return [
        KubeletOptions(
            node_name=n, runtime="containerd" if runtimes.get(n) == CONTAINERD else "fake"
        )
        for n in nodes
    ]


# -- the faults ------------------------------------------------------------------------------
def containers(kubelet: Kubelet) -> dict[str, str]:
    """containerd's tasks: container ID -> status (RUNNING, STOPPED, ...)."""
    assert kubelet.containerd is not None
    out = kubelet.containerd.ctr("tasks", "list", check=False).stdout.splitlines()
    tasks = {}
    for line in out[1:]:
        parts = line.split()
        if len(parts) >= 3:
            tasks[parts[0]] = parts[2]
    return tasks


def pod_containers(pods: list[dict[str, Any]], node: str) -> dict[str, tuple[str, int]]:
    """Running pods on ``node`` (not being deleted): pod name -> (container ID, restart
    count)."""
    out = {}
    for pod in pods:
        if (pod.get("spec") or {}).get("nodeName") != node:
            continue
        if pod["metadata"].get("deletionTimestamp"):
            continue
        for cs in (pod.get("status") or {}).get("containerStatuses") or []:
            if cs.get("containerID") and "running" in (cs.get("state") or {}):
                out[pod["metadata"]["name"]] = (
                    cs["containerID"].split("://")[-1],
                    int(cs.get("restartCount", 0)),
                )
    return out


def restart(testbed: Testbed, name: str, timeout: float) -> tuple[float, list[str]]:
    """``runtime-restart`` on a containerd node: containerd SIGKILLed and started again while
    the kubelet runs. Returns the seconds until the node is ready again and what broke: the
    container of a pod Running before (and not deleted meanwhile) no longer RUNNING in
    containerd, or replaced, or restarted."""
    kubelet = testbed.node(name)
    assert kubelet.containerd is not None
    client = testbed.client(field_manager="kubeacc-faults")
    before = pod_containers(_pods(client), name)
    proc = kubelet.containerd.process
    assert proc is not None
    proc.kill()  # SIGKILL: no clean-up of its own
    t0 = time.monotonic()
    kubelet.start_runtime(timeout)
    kubelet.wait_healthy(timeout)
    testbed.wait_node_ready(name, timeout=timeout)
    took = time.monotonic() - t0
    tasks = containers(kubelet)
    # the kubelet's next relist (1 s) and status sync: what the pods say then
    time.sleep(3)
    pods = _pods(client)
    after = pod_containers(pods, name)
    kept = {p["metadata"]["name"] for p in pods if not p["metadata"].get("deletionTimestamp")}
    broken = []
    for pod, (cid, restarts) in sorted(before.items()):
        if pod not in kept:
            continue  # deleted meanwhile (a delete of the step before): its containers go
        if tasks.get(cid) != "RUNNING":
            broken.append(f"pod {pod}: container {cid} {tasks.get(cid, 'gone')} in containerd")
        elif (now := after.get(pod)) is not None and now != (cid, restarts):
            broken.append(f"pod {pod}: container {cid} x{restarts} became {now[0]} x{now[1]}")
    return took, broken


def _pods(client: Any) -> list[dict[str, Any]]:
    return [as_dict(p) for p in client.list(Pod, namespace="*")]


def power_off(kubelet: Kubelet) -> None:
    """``node-reboot`` / ``power-loss`` on a containerd node (the kubelet already stopped):
    every process of the runtime killed, its ``/run`` state cleared."""
    c = kubelet.containerd
    assert c is not None
    ids = set(containers(kubelet)) if c.running() else set()
    if c.process is not None:
        c.process.kill()
    ids |= {p.name for p in (c.dir / "state" / "runc").iterdir()} if _exists(c) else set()
    for pid in c.shim_pids():
        with contextlib.suppress(ProcessLookupError):
            os.kill(pid, signal.SIGKILL)
    for task in ids:
        for procs in Path("/sys/fs/cgroup").glob(f"*/k8s.io/{task}/cgroup.procs"):
            with contextlib.suppress(OSError):
                for pid in procs.read_text().split():
                    with contextlib.suppress(ProcessLookupError):
                        os.kill(int(pid), signal.SIGKILL)
    deadline = time.monotonic() + 10
    while any(_cgroup_busy(t) for t in ids) and time.monotonic() < deadline:
        time.sleep(0.1)
    for task in ids:
        for cgroup in Path("/sys/fs/cgroup").glob(f"*/k8s.io/{task}"):
            with contextlib.suppress(OSError):
                cgroup.rmdir()
    state = c.dir / "state"
    if c.mount_ns is not None:
        c.mount_ns.unmount(c.mount_ns.mounts_under(state))
    _clear(state)
    kubelet.cri_socket.unlink(missing_ok=True)


def _exists(c: Any) -> bool:
    return bool((c.dir / "state" / "runc").is_dir())


def _cgroup_busy(task: str) -> bool:
    for procs in Path("/sys/fs/cgroup").glob(f"*/k8s.io/{task}/cgroup.procs"):
        with contextlib.suppress(OSError):
            if procs.read_text().strip():
                return True
    return False


def _clear(directory: Path) -> None:
    """Everything under ``directory`` removed (a tmpfs after boot), the directory kept."""
    if not directory.is_dir():
        return
    for child in directory.iterdir():
        if child.is_dir() and not child.is_symlink():
            _clear(child)
            with contextlib.suppress(OSError):
                child.rmdir()
        else:
            with contextlib.suppress(OSError):
                child.unlink()


# -- the container's own view ----------------------------------------------------------------
def reports(kubelet: Kubelet, ns: str, pod: str) -> dict[str, dict[str, Any]]:
    """What the pod's containers reported (every attempt's log): container ID -> {"env":
    {name: value}, "dev": set of character device paths}."""
    out: dict[str, dict[str, Any]] = {}
    logs = kubelet.root_dir / "pod-logs"
    for path in sorted(logs.glob(f"{ns}_{pod}_*/{CONTAINER}/*.log")):
        text = _log_text(path)
        for block in re.findall(r"BEGIN\n(.*?)\nEND", text, re.S):
            lines = block.splitlines()
            ident = lines[0].removeprefix("ID ").strip() if lines else ""
            env = dict(ln[4:].split("=", 1) for ln in lines if ln.startswith("ENV ") and "=" in ln)
            dev = {ln[4:] for ln in lines if ln.startswith("DEV ")}
            if ident:
                out[ident] = {"env": env, "dev": dev}
    return out


def _log_text(path: Path) -> str:
    """A CRI log file without its line prefixes ("<time> <stream> <F|P> <text>")."""
    out = []
    for line in path.read_text(errors="replace").splitlines():
        parts = line.split(" ", 3)
        out.append((parts[3] if len(parts) > 3 else "") + ("\n" if parts[2:3] == ["F"] else ""))
    return "".join(out)


def container_violations(
    testbed: Testbed,
    view: ClusterView,
    tracker: Tracker,
    real_nodes: dict[str, Path],
    *,
    grace: float,
    verified: set[str],
) -> list[Violation]:
    """``container-devices``: a Running pod on a containerd node (``real_nodes``: node -> its
    agent's CDI directory) whose current container did not report, within ``grace``, the claim,
    the devices and the CDI spec's environment and device nodes its claim names. The containers
    whose report held are added to ``verified`` (``<node>/<pod>/<container ID>``)."""
    out: list[Violation] = []
    claims = {c["metadata"]["name"]: c for c in view.claims}
    for pod in view.pods:
        node = (pod.get("spec") or {}).get("nodeName")
        if node not in real_nodes or pod["metadata"].get("deletionTimestamp"):
            continue
        name = pod["metadata"]["name"]
        running = pod_containers([pod], node)
        if name not in running:
            continue
        cid, _ = running[name]
        problem = _container_problem(
            reports(testbed.node(node), pod["metadata"]["namespace"], name).get(cid),
            [claims[n] for n in claim_names(pod) if n in claims],
            node,
            real_nodes[node],
        )
        if not problem:
            verified.add(f"{node}/{name}/{cid}")
        key = f"container-devices:{name}:{cid}"
        if problem and tracker.held(key, view.at, grace):
            out.append(Violation("container-devices", f"pod {name} on {node}: {problem}"))
    return out


def _container_problem(
    report: dict[str, Any] | None,
    claims: list[dict[str, Any]],
    node: str,
    cdi_dir: Path,
) -> str:
    if report is None:
        return "its container has not reported"
    env: dict[str, str] = report["env"]
    for claim in claims:
        meta = claim["metadata"]
        if env.get("KUBEACC_CLAIM") != f"{meta['namespace']}/{meta['name']}":
            return f"KUBEACC_CLAIM={env.get('KUBEACC_CLAIM')!r}, not claim {meta['name']}"
        results = ((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}
        for r in results.get("results") or []:
            if r.get("driver") != DRIVER_NAME or r.get("pool") != node:
                continue
            var = "KUBEACC_DEVICE_" + re.sub(r"[^A-Za-z0-9]", "_", r["device"]).upper()
            if var not in env:
                return f"no {var} for device {r['device']}"
        try:
            spec = json.loads(cdi.spec_path(cdi_dir, meta["uid"]).read_text())
        except (OSError, ValueError):
            continue  # no spec (yet): acknowledged-lost reports a Running pod without one
        edits = [spec.get("containerEdits") or {}]
        edits += [d.get("containerEdits") or {} for d in spec.get("devices") or []]
        for e in edits:
            for pair in e.get("env") or []:
                key, _, value = pair.partition("=")
                if env.get(key) != value:
                    return f"{key}={env.get(key)!r} in the container, {value!r} in its CDI spec"
            for dn in e.get("deviceNodes") or []:
                if dn["path"] not in report["dev"]:
                    return f"no character device {dn['path']} in the container"
    return ""
