"""AcceleratorPolicies that make devices memory-shared on this node.

A policy whose ``sharing.mode`` is ``MemoryShared`` or ``MPS`` selects devices by type, vendor
and model (the same rule as the CEL selector of the DeviceClass it generates: empty lists match
everything, values match exactly); the agent publishes the devices it selects as memory-shared,
as it does for ``--memory-shared`` selectors. GPUs and KunLun XPUs are shareable; any other type
(an FPGA, say) only when the policy lists the type in ``selector.types``.

:class:`PolicyShares` keeps the selectors of the policies it last read; a failed read keeps the
previous ones (the API server away must not un-share devices that claims use).
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from kubeacc.crds.types import MEMORY_SHARED_MODES, AcceleratorPolicySpec
from kubeacc.model import Device

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyShare:
    """The device selector of one memory-sharing policy."""

    policy: str
    types: frozenset[str] = frozenset()
    vendors: frozenset[str] = frozenset()
    models: frozenset[str] = frozenset()

    def matches(self, dev: Device) -> bool:
        return (
            (not self.types or dev.type.value in self.types)
            and (not self.vendors or dev.vendor in self.vendors)
            and (not self.models or dev.model in self.models)
        )

    def explicit(self, dev: Device) -> bool:
        """The policy names the device's type (what makes an FPGA shareable)."""
        return dev.type.value in self.types

    def __str__(self) -> str:
        return f"policy {self.policy}"


def policy_shares(policies: Iterable[dict[str, Any]]) -> tuple[PolicyShare, ...]:
    """The selectors of the memory-sharing policies among ``policies`` (API objects)."""
    out = []
    for obj in policies:
        name = str((obj.get("metadata") or {}).get("name", "?"))
        try:
            spec = AcceleratorPolicySpec.model_validate(obj.get("spec") or {})
        except ValidationError as exc:
            log.warning("AcceleratorPolicy %s ignored: %s", name, str(exc).splitlines()[0])
            continue
        if spec.sharing.mode not in MEMORY_SHARED_MODES:
            continue
        sel = spec.selector
        out.append(
            PolicyShare(
                name,
                frozenset(t.value for t in sel.types),
                frozenset(sel.vendors),
                frozenset(sel.models),
            )
        )
    return tuple(sorted(out, key=lambda p: p.policy))


class PolicyShares:
    """The memory-sharing policies as last read through ``list_policies``."""

    def __init__(self, list_policies: Callable[[], list[dict[str, Any]]]) -> None:
        self.list_policies = list_policies
        self.current: tuple[PolicyShare, ...] = ()
        self._error = ""

    def refresh(self) -> tuple[PolicyShare, ...]:
        try:
            found = policy_shares(self.list_policies())
        except Exception as exc:  # API server away, or no RBAC to list policies
            if str(exc) != self._error:
                log.warning("cannot read AcceleratorPolicies (keeping the last): %s", exc)
            self._error = str(exc)
            return self.current
        self._error = ""
        if found != self.current:
            log.info("memory-sharing policies: %s", ", ".join(map(str, found)) or "none")
        self.current = found
        return found
