"""What a reconcile pass needs of each Accelerator, worked out once per version of it.

A pass looks at every Accelerator (cordons of unhealthy devices; the Accelerators each policy
selects), and validating an Accelerator's status into the model costs ~20-40 µs: at 80,000
Accelerators (5,000 nodes of 16 devices) that was seconds per pass, once per policy
(bench/agent_api_load.py). Objects in the watch cache only change with their resourceVersion,
so the few facts a pass uses are kept until the version (or the policies) change -- the facts,
not the parsed objects, which would cost ~10 KB of memory per Accelerator.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from kubeacc.controller.operations import TargetView, covering
from kubeacc.crds.views import PolicySpecView
from kubeacc.model.accelerator import Health


@dataclass(frozen=True)
class AcceleratorFacts:
    """One Accelerator as a pass sees it."""

    cordoned: bool
    #: The device's health (None: the device was never reported).
    health: Health | None
    #: The policies whose selector covers the device.
    covering: tuple[str, ...]


class ParsedAccelerators:
    """:class:`AcceleratorFacts` of every Accelerator of the last pass, by name and version."""

    def __init__(self) -> None:
        self._facts: dict[str, tuple[str, AcceleratorFacts]] = {}
        self._specs: dict[str, PolicySpecView] = {}

    def facts(
        self, accelerators: dict[str, dict[str, Any]], specs: dict[str, PolicySpecView]
    ) -> dict[str, AcceleratorFacts]:
        """The facts of each of ``accelerators`` (by name) under the policies ``specs``;
        forgets the Accelerators not given."""
        if specs != self._specs:
            self._facts, self._specs = {}, dict(specs)
        kept: dict[str, tuple[str, AcceleratorFacts]] = {}
        for name, obj in accelerators.items():
            version = (obj.get("metadata") or {}).get("resourceVersion") or ""
            known = self._facts.get(name)
            if known is not None and version and known[0] == version:
                facts = known[1]
            else:
                view = TargetView.parse(obj)
                dev = view.device
                facts = AcceleratorFacts(
                    cordoned=view.spec.cordoned,
                    health=dev.health if dev is not None else None,
                    covering=tuple(covering(specs, dev)) if dev is not None else (),
                )
            kept[name] = (version, facts)
        self._facts = kept
        return {name: facts for name, (_, facts) in kept.items()}
