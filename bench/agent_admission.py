"""What the agent containment policy costs per write; prints JSON.

Starts the testbed control plane (no kubelet), installs deploy/rbac and deploy/admission, and
makes the writes a node agent makes, as that agent (certificate ``system:kubeacc:agent:<node>``
in group ``kubeacc:agents``): an Accelerator status apply, a ResourceSlice apply with the next
pool generation, an operation result apply, an Event. Each kind is timed ``--writes`` times
with the policy binding in place and ``--writes`` times without it, in alternating rounds so
that a busy machine weighs on both alike.

    python bench/agent_admission.py [--writes 100] [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.admissionregistration_v1 import ValidatingAdmissionPolicyBinding
from lightkube.resources.core_v1 import Namespace
from lightkube.types import PatchType

from kubeacc.agent.dra.slices import build_slices
from kubeacc.crds.api import API_VERSION, NODE_LABEL
from kubeacc.crds.deploy import apply_manifest
from kubeacc.crds.events import emit_event
from kubeacc.crds.resources import Accelerator, AcceleratorOperation, install_crds
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import agent_cert_client, install_agent_access

NODE = "bench-a"
NS = "bench"
DEVICE = "gpu-0000-01-00-0"
ACC = f"{NODE}-{DEVICE}"
OP = "reset"
BINDING = "kubeacc-agent-node-restriction"
_PLUGIN_METRIC = "apiserver_admission_controller_admission_duration_seconds"


def _ms(samples: list[float]) -> dict[str, float]:
    ordered = sorted(samples)
    return {
        "p50_ms": round(statistics.median(ordered) * 1e3, 2),
        "p99_ms": round(ordered[min(len(ordered) - 1, int(len(ordered) * 0.99))] * 1e3, 2),
    }


class Writes:
    """The agent's four kinds of writes, each a little different every time."""

    def __init__(self, agent: Client) -> None:
        self.agent = agent
        self.n = 0
        self.generation = 1

    def accelerator_status(self) -> Any:
        self.n += 1
        body = {
            "apiVersion": API_VERSION,
            "kind": "Accelerator",
            "metadata": {"name": ACC, "labels": {NODE_LABEL: NODE}},
            "spec": {"node": NODE, "deviceName": DEVICE},
            "status": {"hostDriver": f"drv{self.n % 2}"},
        }
        return self.agent.patch(
            Accelerator.Status, ACC, body, patch_type=PatchType.APPLY, force=True
        )

    def slice(self) -> Any:
        self.generation += 1
        (obj,) = build_slices(NODE, None, [{"name": DEVICE}], self.generation)
        return self.agent.apply(from_dict(obj), force=True)

    def result(self) -> Any:
        self.n += 1
        res = {
            "accelerator": ACC,
            "node": NODE,
            "phase": "Running",
            "reason": "Running",
            "message": str(self.n),
        }
        body = {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": OP, "namespace": NS},
            "status": {"results": [res]},
        }
        return self.agent.patch(
            AcceleratorOperation.Status,
            OP,
            body,
            namespace=NS,
            patch_type=PatchType.APPLY,
            force=True,
        )

    def event(self) -> None:
        op: dict[str, Any] = {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": OP, "namespace": NS},
        }
        emit_event(self.agent, op, "Reset", ACC, component=f"kubeacc-agent-{NODE}")

    def kinds(self) -> dict[str, Callable[[], Any]]:
        return {
            "accelerator_status": self.accelerator_status,
            "resourceslice": self.slice,
            "operation_result": self.result,
            "event": self.event,
        }


def _enforced(agent: Client) -> bool:
    """Is the policy in force for the agent right now (a foreign write refused)?"""
    body = {
        "apiVersion": API_VERSION,
        "kind": "Accelerator",
        "metadata": {"name": "other-gpu-0000-02-00-0"},
        "spec": {"node": "other", "deviceName": "gpu-0000-02-00-0"},
    }
    try:
        agent.patch(
            Accelerator, "other-gpu-0000-02-00-0", body, patch_type=PatchType.APPLY, dry_run=True
        )
    except ApiError:
        return True
    return False


def _wait(agent: Client, enforced: bool) -> None:
    deadline = time.monotonic() + 60
    while _enforced(agent) != enforced:
        if time.monotonic() > deadline:
            raise SystemExit(f"the policy never became {'active' if enforced else 'inactive'}")
        time.sleep(0.2)


def _setup(admin: Client) -> None:
    install_crds(admin)
    install_agent_access(admin)
    admin.create(Namespace(metadata=ObjectMeta(name=NS)))
    admin.patch(
        Accelerator,
        ACC,
        {
            "apiVersion": API_VERSION,
            "kind": "Accelerator",
            "metadata": {"name": ACC, "labels": {NODE_LABEL: NODE}},
            "spec": {"node": NODE, "deviceName": DEVICE},
        },
        patch_type=PatchType.APPLY,
    )
    admin.patch(
        AcceleratorOperation,
        OP,
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": OP, "namespace": NS},
            "spec": {"action": "Reset", "targets": [ACC]},
        },
        namespace=NS,
        patch_type=PatchType.APPLY,
    )
    admin.patch(
        AcceleratorOperation.Status,
        OP,
        {
            "apiVersion": API_VERSION,
            "kind": "AcceleratorOperation",
            "metadata": {"name": OP, "namespace": NS},
            "status": {
                "phase": "Running",
                "dispatch": [{"accelerator": ACC, "node": NODE, "deviceName": DEVICE}],
            },
        },
        namespace=NS,
        patch_type=PatchType.APPLY,
        field_manager="kubeacc-controller",
    )


def _admission_time(tb: Testbed) -> tuple[float, float]:
    """(seconds, requests) the API server has spent so far in its ValidatingAdmissionPolicy
    plugin on admitted requests: the policy's own cost, without the network or the write."""
    text = subprocess.run(
        [*tb.kubectl(), "get", "--raw", "/metrics"], check=True, capture_output=True, text=True
    ).stdout
    total = {"sum": 0.0, "count": 0.0}
    for line in text.splitlines():
        head, _, value = line.rpartition(" ")
        if (
            head.startswith(f"{_PLUGIN_METRIC}_")
            and 'name="ValidatingAdmissionPolicy"' in head
            and 'rejected="false"' in head
        ):
            suffix = head.split("{", 1)[0].removeprefix(f"{_PLUGIN_METRIC}_")
            if suffix in total:
                total[suffix] += float(value)
    return total["sum"], total["count"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--writes", type=int, default=100, help="writes per kind, round and setting")
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    tb = Testbed.start(with_kubelet=False)
    try:
        admin = tb.client(field_manager="bench")
        _setup(admin)
        with tempfile.TemporaryDirectory() as tmp:
            agent = agent_cert_client(tb, NODE, Path(tmp))
            writes = Writes(agent)
            samples: dict[tuple[str, bool], list[float]] = {}
            admission: dict[tuple[str, bool], list[float]] = {}
            for _ in range(args.rounds):
                for enforced in (True, False):
                    if enforced:
                        apply_manifest(admin, "admission/agent-node-restriction.yaml")
                    else:
                        admin.delete(ValidatingAdmissionPolicyBinding, BINDING)
                    _wait(agent, enforced)
                    for write in writes.kinds().values():
                        write()  # warm-up
                    for kind, write in writes.kinds().items():
                        before = _admission_time(tb)
                        for _ in range(args.writes):
                            t0 = time.perf_counter()
                            write()
                            samples.setdefault((kind, enforced), []).append(
                                time.perf_counter() - t0
                            )
                        after = _admission_time(tb)
                        spent = admission.setdefault((kind, enforced), [0.0, 0.0])
                        spent[0] += after[0] - before[0]
                        spent[1] += after[1] - before[1]
        result: dict[str, Any] = {"writes_per_kind_and_setting": args.writes * args.rounds}
        for kind in writes.kinds():
            on, off = _ms(samples[(kind, True)]), _ms(samples[(kind, False)])
            result[kind] = {
                "with_policy": on,
                "without_policy": off,
                "p50_overhead_ms": round(on["p50_ms"] - off["p50_ms"], 2),
            }
            for enforced in (True, False):
                secs, n = admission[(kind, enforced)]
                key = "with_policy" if enforced else "without_policy"
                result[kind][key]["admission_mean_ms"] = round(secs / n * 1e3, 3) if n else None
        print(json.dumps(result, indent=2))
    finally:
        tb.stop()


if __name__ == "__main__":
    main()
