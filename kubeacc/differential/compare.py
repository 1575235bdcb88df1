"""Run the engine and kube-scheduler's allocator on the same scenarios; count disagreements.

For every scenario, claim and node (each claim on the scenario's existing allocations only):
both must agree whether the claim can be allocated there (a scheduler error counts as "no");
where both allocate, the engine's allocation must be the scheduler's own pick or be accepted by
the scheduler's allocator when the scenario is pinned to it (:mod:`kubeacc.differential.validator`;
pinning removes the other devices, so it cannot reproduce picks that depend on the scheduler's
search path, such as its distinctAttribute bookkeeping after a backtrack).
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from kubeacc.differential.generator import scenario
from kubeacc.differential.harness import GoAllocator
from kubeacc.differential.validator import pinned_scenario
from kubeacc.engine.engine import Engine
from kubeacc.engine.quantity import parse_quantity


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


def compare_seed(seed: int, go: GoAllocator, report: Report) -> None:
    scen, features = scenario(seed)
    report.scenarios += 1
    report.coverage.update(features)
    rows = go.pairs(scen)
    engine = Engine(scen["slices"], scen["classes"], scen["allocated"], scen["nodes"])
    for ci, claim in enumerate(scen["claims"]):
        for ni, node in enumerate(scen["nodes"]):
            name = node["metadata"]["name"]
            theirs = rows[ci][ni]
            report.pairs += 1
            if theirs.get("error"):
                report.go_errors += 1
            ours = engine.allocate(claim, node=name, commit=False)
            if ours.ok != theirs["ok"]:
                report.disagreements.append(
                    {
                        "seed": seed,
                        "claim": ci,
                        "node": name,
                        "scheduler": theirs.get("error") or theirs["ok"],
                        "engine": ours.ok or (ours.explanation.lines() if ours.explanation else []),
                    }
                )
                continue
            if ours.ok and ours.allocation is not None:
                report.both_allocate += 1
                if _devices(ours.allocation) == _devices(theirs["allocation"]):
                    # The scheduler's own pick: what each share consumes must match too.
                    if _consumed(ours.allocation) != _consumed(theirs["allocation"]):
                        report.disagreements.append(
                            {
                                "seed": seed,
                                "claim": ci,
                                "node": name,
                                "scheduler": _consumed(theirs["allocation"]),
                                "engine": _consumed(ours.allocation),
                            }
                        )
                    continue
                check = go.pairs(pinned_scenario(scen, claim, name, ours.allocation))[0][0]
                if not check["ok"]:
                    report.invalid_picks.append(
                        {
                            "seed": seed,
                            "claim": ci,
                            "node": name,
                            "allocation": ours.allocation["devices"]["results"],
                            "scheduler": check.get("error") or "rejects the pinned claim",
                        }
                    )


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


def run_range(start: int, count: int, go: GoAllocator | None = None) -> Report:
    report = Report()
    own = go is None
    go = go or GoAllocator()
    try:
        for seed in range(start, start + count):
            compare_seed(seed, go, report)
    finally:
        if own:
            go.close()
    return report
