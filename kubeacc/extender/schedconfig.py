"""The KubeSchedulerConfiguration ``extenders`` entry that points kube-scheduler at
``kubeacc extender`` (docs/extender.md, "Scheduler configuration")."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubeacc.extender.wants import CORES, GPU, MEMORY, UNITS

#: The resources whose pods kube-scheduler sends to the extender.
MANAGED_RESOURCES = (MEMORY, CORES, UNITS, GPU)


def scheduler_entry(
    url_prefix: str,
    managed: Sequence[str] = MANAGED_RESOURCES,
    *,
    weight: int = 1,
    timeout: str = "10s",
) -> dict[str, Any]:
    return {
        "urlPrefix": url_prefix,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": weight,
        "nodeCacheCapable": True,
        "httpTimeout": timeout,
        "managedResources": [{"name": r} for r in managed],
    }
