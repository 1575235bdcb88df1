"""What the DRA driver's core asks of each kind of device: :class:`DeviceKind`.

The core (:mod:`kubeacc.agent.dra.driver`) owns the gRPC answers, the claim reads, the CDI
specs, the device metadata, the checkpoint and the order of commits. Whatever one kind of device
needs beyond its device nodes and its configs' environment (a MIG instance made, a bitstream
loaded, a GPU sharing strategy applied, a driver's user space injected) is a
:class:`DeviceKind`, called by the core at fixed steps:

- ``prepare``: each device of a new claim, outside the driver lock (MIG: the instance; FPGA:
  the bitstream; sharing: the strategy wanted, the share's limits).
- ``finish``: each new claim once its CDI devices are built, outside the lock (sharing: the
  claim's limits on each share; whole devices: the NVIDIA UUIDs, the driver's user space).
- ``commit``: each new claim under the lock, just before its CDI spec is written (sharing: the
  strategy applied on the GPU).
- ``abandon``: a claim that fails after ``prepare``, in reverse kind order (sharing, MIG).
- ``again``: a prepared claim the kubelet asks for again, and each prepared claim at start
  (FPGA: the bitstream still loaded, or loaded again).
- ``unprepare``: under the lock, before the checkpoint forgets the claims (MIG, sharing).
- ``touches``: whether an unprepare touches a device, so cannot run on the gRPC loop (MIG,
  sharing).
- ``restore``: at start, before the CDI specs are checked (MIG: instances a reboot took made
  again, their claims' records rewritten).
- ``recover``: at start, after the specs, under the lock (sharing: the GPUs' settings agree
  with the prepared claims).
- ``describe``: a claim's device status and metadata (MIG: its instances' UUIDs).

The pause points, the checkpoint record and the rename-aside of unprepare are the core's; a kind
never writes a CDI spec or the checkpoint. :class:`Kind` does nothing at every step, so a kind
overrides only the steps it acts at.

A new backend is a new kind registered with the core, not an edit of the driver. A device a
Cyborg-like service attaches, say::

    class AttachedDevices(Kind):
        def __init__(self, service: AttachService) -> None:
            self.service = service

        def prepare(self, dev: DeviceWork) -> None:
            if dev.info.type != "cyborg":
                return
            try:
                dev.nodes = (*dev.nodes, *self.service.attach(dev.ref.uid, dev.info.name))
            except AttachError as exc:
                raise ClaimError(f"{dev.where}: device {dev.info.name}: {exc}") from None

        def abandon(self, uids: Sequence[str]) -> None:
            for uid in uids:
                self.service.detach_all(uid)  # best effort: recover() finishes it

        def unprepare(self, uids: Sequence[str]) -> None:
            for uid in uids:
                self.service.detach_all(uid)  # raise KindError: the claims stay prepared

        def recover(self, prepared: set[str]) -> None:
            self.service.detach_all_but(prepared)

    driver = Driver(node, claims, devices, cdi_dir=..., state_dir=...,
                    kinds=[AttachedDevices(service)])

Kinds are called in order: the built-in ones (MIG, FPGA, sharing, whole devices) first, then
those given with ``kinds``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.crds.opaque import AnyConfig
from kubeacc.node import cdi

__all__ = ["ClaimError", "ClaimWork", "DeviceKind", "DeviceWork", "Kind", "KindError"]

T = TypeVar("T")


class ClaimError(Exception):
    """This claim cannot be prepared here; the message goes back to the kubelet."""


class KindError(Exception):
    """A kind could not undo a claim's devices at unprepare: the claims stay prepared (the
    kubelet retries); the message goes back to it."""


@dataclass
class DeviceWork:
    """One allocated device of a claim being prepared; the kinds edit its CDI parts."""

    #: The claim it is allocated to (its other devices, the kinds' notes about it).
    claim: ClaimWork
    #: The allocation result (``request``, ``pool``, ``device``, ``shareID``, ...).
    result: Mapping[str, Any]
    info: DeviceInfo
    #: Our opaque configs that apply to the device, in precedence order, each with whether it
    #: comes from the DeviceClass (the admin's).
    configs: list[tuple[AnyConfig, bool]]
    #: The device nodes the container gets (the published ones unless a kind makes others).
    nodes: tuple[str, ...]
    #: The container's environment for the device: the configs', then the kinds' additions.
    env: dict[str, str]
    #: Environment a kind sets that the configs' environment may override.
    base_env: dict[str, str] = field(default_factory=dict)
    #: Host path -> container path, mounted read-write.
    mounts: tuple[tuple[str, str], ...] = ()
    #: The UUID the container sees where it is not the published one (a MIG instance's).
    runtime_uuid: str = ""

    @property
    def ref(self) -> ClaimRef:
        return self.claim.ref

    @property
    def where(self) -> str:
        """ "ResourceClaim ns/name", the start of every error."""
        return self.claim.where

    @property
    def share_id(self) -> str:
        return str(self.result.get("shareID") or "")


@dataclass
class ClaimWork:
    """A claim being prepared: read and checked by the core, its devices by the kinds."""

    ref: ClaimRef
    #: "ResourceClaim ns/name", the start of every error.
    where: str
    #: The ResourceClaim as read from the API server.
    claim: Mapping[str, Any]
    devices: list[DeviceWork] = field(default_factory=list)
    #: One per device, built by the core after :meth:`DeviceKind.prepare`; kinds' ``finish``
    #: may replace them.
    cdi_devices: list[cdi.CDIDevice] = field(default_factory=list)
    #: Claim-wide container edits (the driver's user space), or None.
    claim_edits: dict[str, Any] | None = None
    #: What the checkpoint will hold, once the CDI spec is built.
    prepared: PreparedClaim | None = None
    #: The device metadata files the spec mounts (written with it).
    metadata: dict[str, bytes] = field(default_factory=dict)
    #: What each kind keeps about the claim between its steps, by the kind's own type.
    notes: dict[type, Any] = field(default_factory=dict)

    def note(self, kind: type[T]) -> T:
        """The claim's note of type ``kind`` (made empty on first use)."""
        got = self.notes.get(kind)
        if got is None:
            got = self.notes[kind] = kind()
        assert isinstance(got, kind)
        return got


class DeviceKind(Protocol):
    """One kind of device the driver prepares (module docstring: when each step is called)."""

    def prepare(self, dev: DeviceWork) -> None:
        """Make ``dev`` usable (a MIG instance, a bitstream) and add its CDI edits; raise
        :class:`ClaimError` when it cannot be had (the claim is abandoned)."""

    def finish(self, claim: ClaimWork) -> None:
        """Claim-wide CDI edits once all devices are prepared; :class:`ClaimError` refuses."""

    def commit(self, claim: ClaimWork, others: Sequence[tuple[str, PreparedClaim]]) -> None:
        """Apply settings on the devices just before the claim's spec is written (``others``:
        the claims prepared and those written before it in this call); :class:`ClaimError`
        refuses and undoes what this step did."""

    def abandon(self, uids: Sequence[str]) -> None:
        """The claims will not be prepared after all: undo what prepare and commit made; best
        effort, never raises (:meth:`recover` finishes at the next start)."""

    def again(self, ref: ClaimRef, done: PreparedClaim) -> str:
        """A prepared claim asked for again (or held at start): its devices still as prepared,
        or made so again; the error, or ""."""

    def unprepare(self, uids: Sequence[str]) -> None:
        """Undo the claims' devices before they are forgotten; :class:`KindError` or
        :class:`OSError` keeps them prepared."""

    def touches(self, uids: set[str]) -> bool:
        """Would :meth:`unprepare` of ``uids`` touch a device (and so not run on the gRPC
        loop)?"""

    def restore(self, claims: Mapping[str, PreparedClaim]) -> dict[str, PreparedClaim]:
        """At start, before the CDI specs are checked: what a reboot took made again; the
        prepared claims whose records (spec, devices) changed."""

    def recover(self, prepared: set[str]) -> None:
        """At start, under the lock: the devices agree with the prepared claims (``prepared``:
        their UIDs)."""

    def describe(self, uid: str) -> Mapping[str, str]:
        """Device name -> the UUID claim ``uid``'s containers see, where not the published one
        (device status, metadata)."""


class Kind:
    """A :class:`DeviceKind` that does nothing at every step: subclass it and override."""

    def prepare(self, dev: DeviceWork) -> None:
        return None

    def finish(self, claim: ClaimWork) -> None:
        return None

    def commit(self, claim: ClaimWork, others: Sequence[tuple[str, PreparedClaim]]) -> None:
        return None

    def abandon(self, uids: Sequence[str]) -> None:
        return None

    def again(self, ref: ClaimRef, done: PreparedClaim) -> str:
        return ""

    def unprepare(self, uids: Sequence[str]) -> None:
        return None

    def touches(self, uids: set[str]) -> bool:
        return False

    def restore(self, claims: Mapping[str, PreparedClaim]) -> dict[str, PreparedClaim]:
        return {}

    def recover(self, prepared: set[str]) -> None:
        return None

    def describe(self, uid: str) -> Mapping[str, str]:
        return {}
