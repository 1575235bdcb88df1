"""Shares as a device kind: a memory share's limits (its allocation's ``consumedCapacity``) and
what enforces them go into its CDI device; a ``GpuConfig`` sharing strategy (time-slicing, MPS)
is checked at prepare and applied on the GPU at commit (:mod:`.applied`), undone when the last
claim of the GPU goes."""

from __future__ import annotations

import contextlib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from msgspec import structs

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.kind import ClaimError, ClaimWork, DeviceWork, Kind, KindError
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.agent.dra.sharing.applied import AppliedSharing, GpuWant, SharingError, want_of
from kubeacc.agent.dra.sharing.limits import (
    ENV_MEMORY,
    ShareLimits,
    UnitLimits,
    limit_env,
    share_id_error,
)
from kubeacc.agent.dra.sharing.strategy import claim_strategy_problem, join_problem
from kubeacc.crds.opaque import GpuConfig, SharingStrategy
from kubeacc.node import cdi
from kubeacc.node.shareaccount import names_in
from kubeacc.node.sharelimit import CLAIM_ACCOUNT_PREFIX, EditsError, Limiter, claim_account


@dataclass
class _Shares:
    """What a claim being prepared wants of its GPUs and shares."""

    #: Sharing strategies to apply on the GPUs at commit.
    wants: list[GpuWant] = field(default_factory=list)
    #: Each device with a PCI address (its share, if any), for the claim's limits.
    units: list[UnitLimits] = field(default_factory=list)
    #: Share device -> its vendor, whether MPS serves it, whether its limits are enforced.
    enforced: dict[str, tuple[str, bool, bool]] = field(default_factory=dict)


class SharingKind(Kind):
    """``sharing`` applies GpuConfig sharing strategies (None: such configs are refused);
    ``limiter`` enforces memory shares in their containers (:mod:`kubeacc.node.sharelimit`)."""

    def __init__(self, sharing: AppliedSharing | None, limiter: Limiter) -> None:
        self.sharing = sharing
        self.limiter = limiter

    def prepare(self, dev: DeviceWork) -> None:
        where, info, name = dev.where, dev.info, dev.info.name
        shares = dev.claim.note(_Shares)
        gpu_cfg: GpuConfig | None = None
        strategy_from_class = False
        enforce = True
        for cfg, from_class in dev.configs:
            if isinstance(cfg, GpuConfig) and cfg.enforce is not None:
                if not from_class and not cfg.enforce:
                    raise ClaimError(
                        f"{where}: GpuConfig enforce: false is honoured only from a "
                        "DeviceClass: a claim cannot turn its share's limits off"
                    )
                enforce = cfg.enforce if from_class else enforce
            if isinstance(cfg, GpuConfig) and cfg.sharing is not None:
                gpu_cfg = cfg  # the claim's own config wins over its class's
                strategy_from_class = from_class
        share_id = dev.share_id
        if share_id and gpu_cfg is not None and gpu_cfg.sharing and not strategy_from_class:
            strategy = gpu_cfg.sharing.strategy.value
            raise ClaimError(f"{where}: {claim_strategy_problem(name, strategy)}")
        try:  # a sharing strategy to apply on the GPU (at commit), and its CDI edits
            more_env, mounts = want_of(self.sharing, gpu_cfg, name, info.bus_id, shares.wants)
        except SharingError as exc:
            raise ClaimError(f"{where}: {exc}") from None
        dev.env.update(more_env)
        dev.mounts = (*dev.mounts, *mounts)
        share: ShareLimits | None = None
        if share_id:
            if err := share_id_error(share_id):
                raise ClaimError(f"{where}: device {name}: {err}")
            try:
                share = ShareLimits.from_consumed(
                    dev.result.get("consumedCapacity") or {}, info.memory_bytes
                )
            except ValueError as exc:
                raise ClaimError(f"{where}: device {name}: {exc}") from None
        if info.bus_id:
            shares.units.append(UnitLimits(info.vendor, share, info.memory_bytes))
        if share is not None:
            mps = (
                gpu_cfg is not None
                and gpu_cfg.sharing is not None
                and (gpu_cfg.sharing.strategy is SharingStrategy.MPS)
            )
            shares.enforced[name] = (info.vendor, mps, enforce)

    def finish(self, claim: ClaimWork) -> None:
        """Every share's own CDI device carries the claim's limits and their means."""
        shares = claim.note(_Shares)
        limits = limit_env(shares.units)
        if limits:
            claim.cdi_devices = [
                self._enforced(d, limits, claim.ref, *shares.enforced[d.name]) if d.share_id else d
                for d in claim.cdi_devices
            ]

    def _enforced(
        self,
        dev: cdi.CDIDevice,
        limits: Mapping[str, str],
        ref: ClaimRef,
        vendor: str,
        mps: bool,
        enforce: bool,
    ) -> cdi.CDIDevice:
        """A share's CDI device with the claim's limits and what enforces them; the claim's
        processes (in every container of a pod) keep one account, named by the claim."""
        how = self.limiter.enforcement(vendor, mps, enforce)
        if why := self.limiter.refusal(ref.namespace, how):
            raise ClaimError(f"device {dev.name}: {why}")
        try:
            env, mounts = self.limiter.edits(how, claim_account(ref.uid), limits[ENV_MEMORY])
        except EditsError as exc:
            raise ClaimError(f"device {dev.name}: {exc}") from None
        ro = (*dev.read_only_mounts, *mounts)
        return structs.replace(dev, env={**dev.env, **limits, **env}, read_only_mounts=ro)

    def commit(self, claim: ClaimWork, others: Sequence[tuple[str, PreparedClaim]]) -> None:
        """The claim may join the GPUs' strategies; its own are applied (all or nothing)."""
        assert claim.prepared is not None
        uid, wants = claim.ref.uid, claim.note(_Shares).wants
        where = f"ResourceClaim {claim.prepared.namespace}/{claim.prepared.name}"
        applied = self.sharing.gpus if self.sharing is not None else {}
        if problem := join_problem(uid, claim.prepared, wants, applied, others):
            raise ClaimError(f"{where}: {problem}")
        if wants and self.sharing is not None:
            try:
                self.sharing.acquire(uid, wants)
            except SharingError as exc:
                raise ClaimError(f"{where}: {exc}") from None

    def abandon(self, uids: Sequence[str]) -> None:
        """Undo the GPU settings of claims that were not prepared after all."""
        for uid in uids:
            self.limiter.close(claim_account(uid))
        if self.sharing is not None:
            with contextlib.suppress(OSError):  # reconcile finishes it at the next start
                self.sharing.abandon(uids)

    def unprepare(self, uids: Sequence[str]) -> None:
        for uid in uids:
            self.limiter.close(claim_account(uid))
        if self.sharing is None:
            return
        try:  # the GPU's strategy is undone before its last claim is forgotten
            self.sharing.release(uids)
        except SharingError as exc:
            raise KindError(str(exc)) from exc

    def touches(self, uids: set[str]) -> bool:
        return self.sharing is not None and any(
            uid in gpu["claims"] for gpu in self.sharing.gpus.values() for uid in uids
        )

    def recover(self, prepared: set[str]) -> None:
        if self.limiter.accounts is not None:  # accounts of claims no longer prepared
            for name in names_in(self.limiter.accounts.root, CLAIM_ACCOUNT_PREFIX):
                if name.removeprefix(CLAIM_ACCOUNT_PREFIX) not in prepared:
                    self.limiter.close(name)
        if self.sharing is not None:
            self.sharing.reconcile(prepared)
