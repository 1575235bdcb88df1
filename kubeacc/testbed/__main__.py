"""``python -m kubeacc.testbed build|runtime|image|helm|peers|volcano|cyborg|up|bin-dir``."""

from __future__ import annotations

import argparse
import os
import signal
import sys
import time
from collections.abc import Callable
from pathlib import Path
from types import FrameType
from typing import Literal

from kubeacc.testbed.build import BuildError, bin_dir, ensure_built
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.shapes import multinode_options
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.withkubeacc import Installed, InstallError, install


def _raise_exit(signum: int, frame: FrameType | None) -> None:
    raise SystemExit(128 + signum)


def _print_built(what: str, ensure: Callable[[], Path]) -> int:
    """Build (or reuse) one cached Go tool and print its path; 1 with the reason if it fails."""
    try:
        print(ensure())
    except BuildError as exc:
        print(f"{what} build failed: {exc}", file=sys.stderr)
        return 1
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kubeacc.testbed")
    sub = parser.add_subparsers(dest="cmd", required=True)
    b = sub.add_parser("build", help="build (or reuse) the binaries; print their directory")
    b.add_argument("--force", action="store_true", help="rebuild even when cached")
    sub.add_parser("bin-dir", help="print where the binaries for these sources live")
    sub.add_parser("helm", help="build (or reuse) helm from tools/helm; print its path")
    sub.add_parser(
        "peers",
        help="build (or reuse) the Go peers of the benchmarks from tools/peers (upstream's "
        "sample device plugin and DRA test driver); print their directory",
    )
    sub.add_parser(
        "volcano",
        help="build (or reuse) Volcano's scheduler and controller manager and its CRDs from "
        "the pinned source tarball (kubeacc.testbed.volcano); print their directory",
    )
    sub.add_parser(
        "cyborg",
        help="install (or reuse) OpenStack Cyborg and Placement in a venv of their own "
        "(kubeacc.testbed.cyborgcloud); print its directory",
    )
    sub.add_parser(
        "runtime",
        help="build (or reuse) containerd, its shim, ctr and the CNI plugins from "
        "tools/containerd; check runc and busybox-static; print the bin directory",
    )
    sub.add_parser(
        "image",
        help="make (or reuse) the kube-acc image for the real runtime from this Python and "
        "source tree; print the tarball",
    )
    up = sub.add_parser("up", help="start a cluster with a kubelet; stop it with Ctrl-C")
    up.add_argument("--workdir", type=Path, help="work directory (default: new dir under /tmp)")
    up.add_argument("--keep", action="store_true", help="keep the work directory after stopping")
    up.add_argument("--node-name", default="node-a")
    up.add_argument("--topology-manager-policy", default="none")
    up.add_argument("--cpu-manager-policy", default="none")
    up.add_argument("--no-kubelet", action="store_true")
    up.add_argument(
        "--runtime",
        choices=("fake", "containerd"),
        default=None,
        help="the kubelets' container runtime (containerd: containers really run); default "
        "fake, containerd with --with-kubeacc",
    )
    up.add_argument(
        "--with-kubeacc",
        action="store_true",
        help="install kube-acc by its Helm chart: the image imported into the node's "
        "containerd, a synthetic host (device nodes, NVML stand-in, bitstreams) as the agent's "
        "host root (kubeacc.testbed.withkubeacc)",
    )
    up.add_argument(
        "--host",
        dest="host_profile",
        metavar="PROFILE",
        help="the synthetic host profile under --with-kubeacc (default dgx-h100; "
        "kubeacc.synthetic.profiles)",
    )
    up.add_argument(
        "--multinode",
        action="store_true",
        help="four kubelets: gpu-server, fpga-node, kunlun-node, edge-node",
    )
    up.add_argument(
        "--volcano",
        action="store_true",
        help="also run Volcano's scheduler and controller manager (pods naming "
        "schedulerName: volcano), built from the pinned source when missing",
    )
    up.add_argument("--for", dest="duration", type=float, help="stop after this many seconds")
    args = parser.parse_args(argv)

    if args.cmd == "bin-dir":
        print(bin_dir())
        return 0
    if args.cmd == "helm":
        from kubeacc.testbed.helm import ensure_helm

        return _print_built("helm", ensure_helm)
    if args.cmd == "peers":
        from kubeacc.testbed.peers import ensure_built as ensure_peers

        return _print_built("peers", ensure_peers)
    if args.cmd == "volcano":
        from kubeacc.testbed.volcano import ensure_built as ensure_volcano

        return _print_built("volcano", ensure_volcano)
    if args.cmd == "cyborg":
        from kubeacc.testbed.cyborgcloud import ensure_built as ensure_cyborg

        return _print_built("cyborg", ensure_cyborg)
    if args.cmd == "image":
        from kubeacc.testbed.kubeacc_image import KubeaccImageError, ensure_image

        try:
            print(ensure_image().tarball)
        except (KubeaccImageError, OSError) as exc:
            print(f"kube-acc image failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "runtime":
        from kubeacc.testbed.images import BUSYBOX, busybox_layer
        from kubeacc.testbed.runtime import ensure_runtime, find_runc

        try:
            print(ensure_runtime())
            find_runc()
            busybox_layer(BUSYBOX)
        except (BuildError, OSError, RuntimeError) as exc:
            print(f"runtime build failed: {exc}", file=sys.stderr)
            return 1
        return 0
    if args.cmd == "build":
        try:
            print(ensure_built(force=args.force))
        except BuildError as exc:
            print(f"testbed build failed: {exc}", file=sys.stderr)
            return 1
        return 0

    problem = _check_up(args)
    if problem:
        parser.error(problem)
    runtime: Literal["fake", "containerd"] = args.runtime or (
        "containerd" if args.with_kubeacc else "fake"
    )
    signal.signal(signal.SIGTERM, _raise_exit)
    # Ctrl-C is how `up` is stopped, also when a shell started it in the background: such a
    # shell ignores SIGINT for its children, and Python then keeps it ignored.
    signal.signal(signal.SIGINT, signal.default_int_handler)
    t0 = time.monotonic()
    options = KubeletOptions(
        node_name=args.node_name,
        topology_manager_policy=args.topology_manager_policy,
        cpu_manager_policy=args.cpu_manager_policy,
        runtime=runtime,
    )
    nodes = multinode_options() if args.multinode else None
    for node in nodes or ():
        node.runtime = runtime
    tb = Testbed.start(
        args.workdir,
        kubelet=None if args.multinode else options,
        nodes=nodes,
        with_kubelet=not args.no_kubelet,
        keep=args.keep,
        volcano=args.volcano,
    )
    try:
        installed = None
        if args.with_kubeacc:
            t1 = time.monotonic()
            installed = install(tb, tb.workdir / "kubeacc", profile=args.host_profile or "dgx-h100")
            tb.timings["kubeacc_ready_s"] = time.monotonic() - t1
        steps = ", ".join(f"{k} {v:.1f}s" for k, v in tb.timings.items())
        print(f"ready in {time.monotonic() - t0:.1f}s ({steps})", file=sys.stderr)
        print(f"workdir:    {tb.workdir}", file=sys.stderr)
        print(f"logs:       {tb.logs_dir}", file=sys.stderr)
        print(f"nodes:      {', '.join(tb.node_names) or 'none'}", file=sys.stderr)
        print(f"kubectl:    {' '.join(tb.kubectl())}", file=sys.stderr)
        if installed is not None:
            for line in _kubeacc_lines(installed, args.keep):
                print(line, file=sys.stderr)
        print(tb.kubeconfig, flush=True)
        deadline = None if args.duration is None else time.monotonic() + args.duration
        while deadline is None or time.monotonic() < deadline:
            time.sleep(1)
            tb.check_alive()
    except KeyboardInterrupt:
        pass
    except (InstallError, BuildError, OSError) as exc:
        print(f"kube-acc install failed: {exc}", file=sys.stderr)
        print(f"cluster logs kept in {tb.logs_dir}", file=sys.stderr)
        tb.keep = True
        return 1
    finally:
        tb.stop()
    return 0


def _check_up(args: argparse.Namespace) -> str | None:
    """Why these ``up`` arguments cannot work (checked before anything starts), or None."""
    if args.host_profile is not None and not args.with_kubeacc:
        return "--host needs --with-kubeacc"
    if not args.with_kubeacc:
        return None
    if args.runtime == "fake":
        return "--with-kubeacc runs kube-acc's pods: it needs --runtime containerd"
    if args.multinode or args.no_kubelet:
        return "--with-kubeacc takes one node (its synthetic host): drop --multinode/--no-kubelet"
    from kubeacc.synthetic.profiles import PROFILES

    if args.host_profile is not None and args.host_profile not in PROFILES:
        return f"unknown --host {args.host_profile!r}; known: {', '.join(sorted(PROFILES))}"
    return None


def _kubeacc_lines(installed: Installed, keep: bool) -> list[str]:
    """What the admin needs once kube-acc is installed: where things are, how to use, stop."""
    tb = installed.testbed
    env = tb.workdir / "env.sh"
    env.write_text(installed.shell_env())
    return [
        f"kube-acc:   release {installed.release} in namespace {installed.namespace} "
        f"(charts/kubeacc), agent and controller ready",
        f"host:       {installed.host} (agent.hostRoot)",
        f"values:     {installed.values_file}",
        f"shell:      . {env}    # KUBECONFIG; kubectl, helm, kubeacc on PATH",
        f"stop:       Ctrl-C here (or kill {os.getpid()}); the cluster and kube-acc stop"
        + (f", {tb.workdir} stays" if keep else f" and {tb.workdir} is removed"),
    ]


if __name__ == "__main__":
    sys.exit(main())
