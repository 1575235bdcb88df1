"""The fault runner (tests/faults, docs/testing.md "Fault runner") run long.

Starts a testbed with one kubelet per node of ``--nodes`` (name=profile pairs, profiles of
tests/faults/nodes.py; default a dgx-h100 GPU node, a KunLun XPU node and an L4 node whose shares
kubeacc extender places: kube-scheduler runs with the extender unless --no-extender; the nodes
of ``--containerd`` on containerd + runc (default: the first ``dgx-h100`` node, whose kinds are
whole GPUs, shares, MIG partitions and NIC VFs; ``--containerd ''``: none), the others on the
fake CRI runtime, tests/faults/runtime.py), runs the
seeded workload with every fault kind of tests/faults/faults.py for ``--minutes`` (after one API
server outage of ``--long-outage`` seconds, when given: what the nodes kept and the agents' memory
during it), and prints one JSON object: per fault kind how many were injected, the invariants they
broke, the time to recover (p50, max), and what the workload saw (pods created/deleted, API errors,
the reasons pods gave while not Running).

    python bench/faults.py [--minutes 5] [--seed 46] [--long-outage 300] \
        [--nodes g=dgx-h100,x=kunlun-xpu,f=fpga-arria,p=l4-plugin] [--kinds gpu,fpga,...] \
        [--faults agent-kill,clock-step,...] [--containerd fault-gpu,...]
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
import tempfile
import time
from pathlib import Path

from kubelet_client import tests_module

from kubeacc.testbed import Testbed
from kubeacc.testbed.mountns import shared

DEFAULT_NODES = "fault-gpu=dgx-h100,fault-xpu=kunlun-xpu,fault-ext=l4-extender"


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--minutes", type=float, default=5.0)
    parser.add_argument("--seed", type=int, default=46)
    parser.add_argument("--nodes", default=DEFAULT_NODES)
    parser.add_argument(
        "--kinds",
        default="gpu,share,mig,nic,xpu,plugin,extender",
        help="claim kinds of the workload (fpga needs a fault-fpga=fpga-arria node)",
    )
    parser.add_argument(
        "--faults", default="", help="fault kinds to inject (default: every kind of faults.py)"
    )
    parser.add_argument(
        "--containerd",
        default=None,
        help="nodes whose kubelet runs on containerd + runc (comma-separated; '' for none; "
        "default: the first dgx-h100 node)",
    )
    parser.add_argument("--max-live", type=int, default=8, help="at most this many pods at once")
    parser.add_argument(
        "--long-outage",
        type=float,
        default=0.0,
        help="seconds of one API server outage under the workload before the mixed faults",
    )
    parser.add_argument(
        "--no-extender",
        action="store_true",
        help="kube-scheduler without kubeacc extender (then no extender kind, no extender-kill)",
    )
    parser.add_argument(
        "--keep", action="store_true", help="keep the testbed's and the agents' directories"
    )
    args = parser.parse_args()
    runner = tests_module("faults.runner")
    rt = tests_module("faults.runtime")
    ext = tests_module("faults.extender")
    known = tests_module("faults.faults").KINDS
    default = tuple(k for k in known if not (args.no_extender and k == ext.EXTENDER_KILL))
    faults = tuple(args.faults.split(",")) if args.faults else default
    if unknown := sorted(set(faults) - set(known)):
        parser.error(f"unknown fault kinds {', '.join(unknown)} (known: {', '.join(known)})")
    nodes = dict(pair.split("=", 1) for pair in args.nodes.split(","))
    if args.containerd is None:
        args.containerd = next((n for n, p in sorted(nodes.items()) if p == "dgx-h100"), "")
    runtimes = {n: rt.CONTAINERD for n in args.containerd.split(",") if n}
    try:
        options = rt.kubelet_options(nodes, runtimes)
    except ValueError as exc:
        parser.error(str(exc))
    work = Path(tempfile.mkdtemp(prefix="kubeacc-faults-"))
    plan = None if args.no_extender else ext.Plan.make(work)
    config = runner.Config(
        seed=args.seed,
        duration=args.minutes * 60,
        nodes=nodes,
        kinds=tuple(args.kinds.split(",")),
        long_outage=args.long_outage,
        max_live=args.max_live,
        fault_kinds=faults,
        runtimes=runtimes,
        extender=plan,
    )
    t0 = time.monotonic()
    # the agents' lazy mounts under work show in the containerd nodes' mount namespaces
    with (
        shared(work),
        Testbed.start(
            nodes=options,
            keep=args.keep,
            scheduler_extenders=ext.scheduler_extenders(plan),
        ) as tb,
    ):
        report = runner.Runner(tb, work, config).run()
    if args.keep:
        print(f"agents' logs and state kept in {work}; testbed in {tb.workdir}", file=sys.stderr)
    else:
        shutil.rmtree(work, ignore_errors=True)
    out = report.as_json()
    out["wall_s"] = round(time.monotonic() - t0, 1)
    print(json.dumps(out, indent=2))
    return 1 if report.violations() else 0


if __name__ == "__main__":
    sys.exit(main())
