"""Each Accelerator parsed once per version, not once per reconcile pass.

A pass looks at every Accelerator (cordons of unhealthy devices; the Accelerators each policy
selects), and validating an Accelerator's status into the model costs ~20-40 µs: at 80,000
Accelerators (5,000 nodes of 16 devices) that was seconds per pass, once per policy
(bench/agent_api_load.py). Objects in the watch cache only change with their resourceVersion,
so the parsed view is kept until the version changes.
"""

from __future__ import annotations

from typing import Any

from kubeacc.controller.operations import TargetView


class ParsedAccelerators:
    """:class:`TargetView` of every Accelerator of the last pass, by name and version."""

    def __init__(self) -> None:
        self._views: dict[str, tuple[str, TargetView]] = {}

    def views(self, accelerators: dict[str, dict[str, Any]]) -> dict[str, TargetView]:
        """The view of each of ``accelerators`` (by name); forgets the ones not given."""
        kept: dict[str, tuple[str, TargetView]] = {}
        for name, obj in accelerators.items():
            version = (obj.get("metadata") or {}).get("resourceVersion") or ""
            known = self._views.get(name)
            if known is not None and version and known[0] == version:
                view = known[1]
            else:
                view = TargetView.parse(obj)
            kept[name] = (version, view)
        self._views = kept
        return {name: view for name, (_, view) in kept.items()}
