"""Why a claim could not be allocated: per node, then aggregated over nodes."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Funnel:
    """How many devices survived each filter for one request (or subrequest)."""

    request: str
    stages: list[tuple[str, int]] = field(default_factory=list)
    need: str = ""

    def add(self, label: str, count: int) -> None:
        self.stages.append((label, count))

    @property
    def last(self) -> int:
        return self.stages[-1][1] if self.stages else 0

    def __str__(self) -> str:
        parts = [f"{n} {label}" for label, n in self.stages]
        return (
            f"request {self.request}: "
            + ", ".join(parts)
            + (f", need {self.need}" if self.need else "")
        )


@dataclass
class Explanation:
    claim: str
    general: list[str] = field(default_factory=list)
    per_node: dict[str, list[str]] = field(default_factory=dict)

    def add(self, node: str, reason: str) -> None:
        self.per_node.setdefault(node, []).append(reason)

    def groups(self) -> list[tuple[str, list[str]]]:
        """(reason, nodes) pairs, most common reason first."""
        by_reason: dict[str, list[str]] = {}
        for node, reasons in self.per_node.items():
            by_reason.setdefault("; ".join(reasons), []).append(node)
        return sorted(by_reason.items(), key=lambda kv: (-len(kv[1]), kv[0]))

    def lines(self, max_nodes_shown: int = 3) -> list[str]:
        out = list(self.general)
        for reason, nodes in self.groups():
            shown = ", ".join(nodes[:max_nodes_shown])
            extra = len(nodes) - max_nodes_shown
            more = f" (+{extra} more)" if extra > 0 else ""
            out.append(f"{shown}{more}: {reason}")
        return out

    def __str__(self) -> str:
        return f"claim {self.claim} cannot be allocated:\n  " + "\n  ".join(self.lines())

    def to_dict(self) -> dict[str, object]:
        return {
            "claim": self.claim,
            "reasons": self.general,
            "nodes": [{"reason": r, "nodes": n} for r, n in self.groups()],
        }
