"""MIG partitions as a device kind: the instance is made at prepare (its intent on disk first,
:mod:`.prepare`), destroyed when the claim fails or is unprepared, made again at start for the
prepared claims a reboot took and destroyed for the claims not prepared."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.hooks import pause_point
from kubeacc.agent.dra.kind import ClaimError, DeviceWork, Kind, KindError
from kubeacc.agent.dra.mig.model import MigError
from kubeacc.agent.dra.mig.prepare import MigPartitions, Restored
from kubeacc.agent.dra.mig.restore import rewritten
from kubeacc.agent.dra.whole.kind import NVIDIA_VISIBLE
from kubeacc.crds.opaque import GpuConfig

log = logging.getLogger(__name__)


class MigKind(Kind):
    """Partition devices (``info.mig``); ``partitions`` None: NVML is off here (such devices
    are refused)."""

    def __init__(
        self,
        partitions: MigPartitions | None,
        devices: Callable[[], Mapping[str, DeviceInfo]],
        state_dir: Path,
        device_root: Path,
    ) -> None:
        self.partitions = partitions
        self.devices = devices
        self.state_dir = state_dir
        self.device_root = device_root

    def prepare(self, dev: DeviceWork) -> None:
        info = dev.info
        if info.mig is None:
            return
        if self.partitions is None:
            raise ClaimError(
                f"{dev.where}: device {info.name} is a MIG partition; NVML is off here"
            )
        if any(isinstance(c, GpuConfig) and c.sharing is not None for c, _ in dev.configs):
            raise ClaimError(
                f"{dev.where}: device {info.name} is a MIG partition: a GpuConfig sharing "
                "strategy would change the whole GPU"
            )
        try:
            nodes, mig_uuid = self.partitions.create(dev.ref.uid, info.name, info.mig)
        except MigError as exc:
            raise ClaimError(f"{dev.where}: device {info.name}: {exc}") from None
        pause_point("prepare-after-mig", self.state_dir)
        dev.nodes = (*nodes, *info.device_nodes)
        dev.base_env.update({NVIDIA_VISIBLE: mig_uuid, "KUBEACC_MIG_PROFILE": info.mig.profile})
        dev.runtime_uuid = mig_uuid

    def abandon(self, uids: Sequence[str]) -> None:
        """Destroy the instances a failed prepare made (the next start retries)."""
        if self.partitions is None:
            return
        for uid in uids:
            try:
                self.partitions.release({uid})
            except MigError as exc:
                log.error("claim %s: %s", uid, exc)

    def unprepare(self, uids: Sequence[str]) -> None:
        if self.partitions is None:
            return
        try:  # instances go before the claim is forgotten
            self.partitions.release(set(uids))
        except MigError as exc:
            raise KindError(str(exc)) from exc

    def touches(self, uids: set[str]) -> bool:
        return self.partitions is not None and self.partitions.may_hold(uids)

    def restore(self, claims: Mapping[str, PreparedClaim]) -> dict[str, PreparedClaim]:
        """Destroy the instances of claims not prepared, then make again those of prepared
        claims that are gone (a node reboot, a GPU reset); their claims' records name the new
        instances."""
        if self.partitions is None:
            return {}
        try:
            self.partitions.reconcile(set(claims))
            minors = {i.mig.gpu_bus_id: i.mig.gpu_minor for i in self.devices().values() if i.mig}
            made = self.partitions.restore(set(claims), minors)
        except MigError as exc:  # NVML away: the next start (or unprepare) tries again
            log.error("MIG instances not reconciled: %s", exc)
            return {}
        by_claim: dict[str, list[Restored]] = {}
        for r in made:
            by_claim.setdefault(r.claim, []).append(r)
        return {
            uid: rewritten(claims[uid], uid, rs, self.device_root) for uid, rs in by_claim.items()
        }

    def describe(self, uid: str) -> Mapping[str, str]:
        return self.partitions.uuids(uid) if self.partitions is not None else {}
