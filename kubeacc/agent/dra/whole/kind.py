"""Whole devices as a device kind: a device is given as published (its device nodes, the
environment of the configs that apply); a claim with NVIDIA GPUs (or their MIG partitions) also
gets their UUIDs in ``NVIDIA_VISIBLE_DEVICES`` and the NVIDIA driver's user space
(:mod:`kubeacc.node.userspace`)."""

from __future__ import annotations

from typing import Any

from msgspec import structs

from kubeacc.agent.dra.kind import ClaimError, ClaimWork, Kind
from kubeacc.node.userspace.nvidia import DriverRootError
from kubeacc.node.userspace.provider import DriverUserSpace

#: What the NVIDIA container images read to pick their GPUs: the claim's (MIG) UUIDs.
NVIDIA_VISIBLE = "NVIDIA_VISIBLE_DEVICES"


class WholeDevices(Kind):
    """``user_space``: the NVIDIA driver's user space for NVIDIA GPU claims (None: not
    injected)."""

    def __init__(self, user_space: DriverUserSpace | None) -> None:
        self.user_space = user_space

    def finish(self, claim: ClaimWork) -> None:
        visible = {  # NVIDIA device: its (MIG) UUID
            d.info.name: d.runtime_uuid or d.info.uuid for d in claim.devices if d.info.nvidia_gpu
        }
        if not visible:
            return
        claim.claim_edits = self._user_space(claim.where)
        if uuids := ",".join(dict.fromkeys(u for u in visible.values() if u)):
            claim.cdi_devices = [  # the same list on each: the device injected last sets it
                structs.replace(d, env={**d.env, NVIDIA_VISIBLE: uuids}) if d.name in visible else d
                for d in claim.cdi_devices
            ]

    def _user_space(self, where: str) -> dict[str, Any] | None:
        if self.user_space is None:
            return None
        try:
            return self.user_space.nvidia_edits()
        except DriverRootError as exc:
            raise ClaimError(f"{where}: NVIDIA driver user space: {exc}") from None
