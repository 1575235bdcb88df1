"""What ``kubeacc plan`` cannot predict for pods another scheduler places.

The plan follows kube-scheduler's allocator. A pod whose ``spec.schedulerName`` names another
scheduler gets the same devices from it only where that scheduler runs the same DRA filter
(Volcano's ``predicates`` plugin does); whether and when such a pod is bound is that
scheduler's own decision, which the plan does not guess. :func:`other_schedulers` says, per pod,
what is left out: for Volcano its queue's capability and share, fair share between queues and
jobs, the job order, the gang (the PodGroup's ``minMember`` pods are bound together or not at
all; the plan places each pod's claims alone), and a pod that asks no CPU or memory, which
Volcano treats as BestEffort and binds without its gang (docs/choosing.md, "With Volcano").
The gang size and queue come from the pod's PodGroup: the input's, or the live cluster's
(:mod:`kubeacc.cli.planpodgroups`); where the cluster's could not be read, the reason is said.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

DEFAULT_SCHEDULER = "default-scheduler"
VOLCANO = "volcano"
#: where Volcano's job controller names a pod's PodGroup and queue
GROUP_KEYS = ("scheduling.k8s.io/group-name", "scheduling.volcano.sh/group-name")
QUEUE_KEY = "volcano.sh/queue-name"


@dataclass(frozen=True)
class OtherScheduler:
    """A pod's scheduler other than kube-scheduler, and what the plan does not predict."""

    name: str
    not_predicted: tuple[str, ...]

    def to_dict(self) -> dict[str, Any]:
        return {"name": self.name, "notPredicted": list(self.not_predicted)}


def _ref(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return f"{meta.get('namespace') or 'default'}/{meta.get('name', '?')}"


def _group_queues(objs: list[dict[str, Any]]) -> dict[str, tuple[str | None, int | None]]:
    """``namespace/name`` of each Volcano PodGroup in the input -> (queue, minMember)."""
    out = {}
    for o in objs:
        if o.get("kind") == "PodGroup" and str(o.get("apiVersion", "")).startswith(
            "scheduling.volcano.sh/"
        ):
            spec = o.get("spec") or {}
            member = spec.get("minMember")
            out[_ref(o)] = (spec.get("queue"), member if isinstance(member, int) else None)
    return out


def _asks_cpu_or_memory(pod: dict[str, Any]) -> bool:
    spec = pod.get("spec") or {}
    for c in [*(spec.get("initContainers") or []), *(spec.get("containers") or [])]:
        resources = (c or {}).get("resources") or {}
        for part in ("requests", "limits"):
            if {"cpu", "memory"} & set(resources.get(part) or {}):
                return True
    return False


def _volcano_lines(
    pod: dict[str, Any],
    groups: dict[str, tuple[str | None, int | None]],
    unread: Mapping[str, str],
) -> list[str]:
    meta = pod.get("metadata") or {}
    ns = meta.get("namespace") or "default"
    tags = {**(meta.get("labels") or {}), **(meta.get("annotations") or {})}
    group = next((str(tags[k]) for k in GROUP_KEYS if tags.get(k)), None)
    queue, members = groups.get(f"{ns}/{group}", (None, None)) if group else (None, None)
    queue = queue or tags.get(QUEUE_KEY)
    missing = f"(its PodGroup unknown: {unread[ns]})" if ns in unread else "(not in the input)"
    lines = [
        "whether and when Volcano binds the pod: the devices shown are kube-scheduler's "
        "allocator's choice, which Volcano's DRA filter shares, not a prediction of Volcano",
        f"queue {queue or missing}: its capability and deserved share "
        "(Volcano's proportion or capacity plugin)",
        "fair share between queues and jobs (drf, proportion) and the order of jobs",
    ]
    if group:
        size = f"its {members} members" if members is not None else f"its minMember pods {missing}"
        lines.append(
            f"gang {ns}/{group}: bound together with {size} or not at all; this plan places "
            "the pod's claims alone"
        )
    if not _asks_cpu_or_memory(pod):
        lines.append(
            "the pod asks no CPU or memory: BestEffort to Volcano, whose backfill binds it "
            "without waiting for its gang"
        )
    return lines


def other_schedulers(
    objs: list[dict[str, Any]], unread: Mapping[str, str] | None = None
) -> dict[str, OtherScheduler]:
    """``namespace/name`` of every pod of the input that names a scheduler other than
    kube-scheduler -> what the plan does not predict for it. ``unread``: namespace -> why its
    PodGroups could not be read from the cluster."""
    groups = _group_queues(objs)
    out: dict[str, OtherScheduler] = {}
    for o in objs:
        if o.get("kind") != "Pod":
            continue
        name = (o.get("spec") or {}).get("schedulerName") or DEFAULT_SCHEDULER
        if name == DEFAULT_SCHEDULER:
            continue
        if name == VOLCANO:
            lines = _volcano_lines(o, groups, unread or {})
        else:
            lines = [
                f"whether, when and where {name} binds the pod: the plan shows "
                "kube-scheduler's allocator's choice"
            ]
        out[_ref(o)] = OtherScheduler(str(name), tuple(lines))
    return out
