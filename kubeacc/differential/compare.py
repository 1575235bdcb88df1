"""Run the engine and kube-scheduler's allocator on the same scenarios; count disagreements.

For every scenario, pod and node (each pod's claims together, on the scenario's existing
allocations only, as kube-scheduler allocates a pod's pending claims in one call): both must
agree whether the pod fails with an error (an error that fails the pod in the scheduler must be
one in the engine, not only a "no"; one that only rules the node out is a "no"), and whether the
pod's claims can be allocated there; where both allocate, the engine's allocations (every
device, under its request or chosen subrequest) must be the scheduler's own pick, with the same
consumed capacity, or be accepted by the scheduler's allocator when the scenario is pinned to
them (:mod:`kubeacc.differential.validator`;
pinning removes the other devices, so it cannot reproduce picks that depend on the scheduler's
search path, such as its distinctAttribute bookkeeping after a backtrack).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.differential.build import use_celgo
from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.differential.validator import pinned_pod
from kubeacc.engine.engine import Engine, PodPlacement
from kubeacc.engine.quantity import parse_quantity
from kubeacc.engine.release import Release, release


@dataclass
class Report:
    scenarios: int = 0
    pairs: int = 0
    both_allocate: int = 0
    go_errors: int = 0
    disagreements: list[dict[str, Any]] = field(default_factory=list)
    invalid_picks: list[dict[str, Any]] = field(default_factory=list)
    coverage: Counter[str] = field(default_factory=Counter)

    def summary(self) -> dict[str, Any]:
        return {
            "scenarios": self.scenarios,
            "claim_node_pairs": self.pairs,
            "both_allocate": self.both_allocate,
            "scheduler_errors": self.go_errors,
            "disagreements": len(self.disagreements),
            "invalid_engine_picks": len(self.invalid_picks),
            "coverage": dict(sorted(self.coverage.items())),
        }


def compare_seed(
    seed: int, go: GoAllocator, report: Report, engine_release: Release | None = None
) -> None:
    """One scenario; the engine follows the release (and feature gates) of the allocator ``go``
    runs, or ``engine_release`` (to show that the comparison catches an engine that follows
    another); with compatibility groups enforced, the generator draws them in every shape."""
    which = release(go.release, gates=go.gates)
    scen, features = scenario(seed, which.name, group_shapes=which.compatibility_groups)
    report.scenarios += 1
    report.coverage.update(features)
    pods: list[list[int]] = scen.get("pods") or [[i] for i in range(len(scen["claims"]))]
    rows = go.pairs(scen)
    engine = Engine(
        scen["slices"],
        scen["classes"],
        scen["allocated"],
        scen["nodes"],
        release=engine_release or which,
    )
    for pi, pod in enumerate(pods):
        claims = [scen["claims"][i] for i in pod]
        for ni, node in enumerate(scen["nodes"]):
            name = node["metadata"]["name"]
            theirs = rows[pi][ni]
            report.pairs += 1
            if theirs.get("fatal"):
                report.go_errors += 1
                if len(pod) > 1:
                    report.coverage["pod-errors"] += 1
            where = {"seed": seed, "pod": pi, "claims": pod, "node": name}
            ours = engine.allocate_pod(claims, node=name, commit=False, pod=f"p{pi}")
            if bool(theirs.get("fatal")) != (ours.error is not None):
                report.disagreements.append(
                    {
                        **where,
                        "scheduler": theirs.get("error") or theirs["ok"],
                        "engine": ours.error or _engine_answer(ours),
                    }
                )
                continue
            if ours.ok != theirs["ok"]:
                report.disagreements.append(
                    {
                        **where,
                        "scheduler": theirs.get("error") or theirs["ok"],
                        "engine": ours.ok or _engine_answer(ours),
                    }
                )
                continue
            if not ours.ok:
                continue
            report.both_allocate += 1
            if len(pod) > 1:
                report.coverage["pods-allocated"] += 1
            mine = [p.allocation for p in ours.placements]
            assert all(a is not None for a in mine)
            allocs: list[dict[str, Any]] = theirs.get("allocations") or [theirs["allocation"]]
            if all(_devices(a) == _devices(b) for a, b in zip(mine, allocs, strict=True) if a):
                # The scheduler's own pick: what each share consumes must match too.
                got = [_consumed(a) for a in mine if a]
                want = [_consumed(b) for b in allocs]
                if got != want:
                    report.disagreements.append({**where, "scheduler": want, "engine": got})
                continue
            pinned = pinned_pod(scen, claims, name, [a for a in mine if a])
            check = go.pairs(pinned)[0][0]
            if not check["ok"]:
                report.invalid_picks.append(
                    {
                        **where,
                        "allocation": [a["devices"]["results"] for a in mine if a],
                        "scheduler": check.get("error") or "rejects the pinned pod",
                    }
                )


def _engine_answer(ours: PodPlacement) -> bool | list[str]:
    return ours.ok or (ours.explanation.lines() if ours.explanation else [])


def _devices(allocation: dict[str, Any]) -> list[tuple[str, str, str, str]]:
    return sorted(
        (r["request"], r["driver"], r["pool"], r["device"])
        for r in allocation["devices"]["results"]
    )


def _consumed(
    allocation: dict[str, Any],
) -> list[tuple[str, str, tuple[tuple[str, Fraction], ...]]]:
    """Per result, the capacity it consumes by name as written, in exact numbers."""
    return sorted(
        (
            r["request"],
            r["device"],
            tuple(
                sorted(
                    (k, parse_quantity(str(v)))
                    for k, v in (r.get("consumedCapacity") or {}).items()
                )
            ),
        )
        for r in allocation["devices"]["results"]
    )


def run_range(
    start: int, count: int, go: GoAllocator | None = None, engine_release: Release | None = None
) -> Report:
    report = Report()
    use_celgo()  # the generator's long comprehensions need kube-scheduler's CEL library
    own = go is None
    go = go or GoAllocator()
    try:
        for seed in range(start, start + count):
            compare_seed(seed, go, report, engine_release)
    finally:
        if own:
            go.close()
    return report
