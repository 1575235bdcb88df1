"""Prepare and unprepare claims: the node-side half of DRA, independent of gRPC.

``prepare`` checks the claim (it exists, has the UID the kubelet named, is allocated, its
``kubeacc.io`` devices come from this node's pool and are published here, its opaque config is
valid), writes the claim's CDI spec and then the checkpoint, and only then answers. Each claim
gets its own answer or error. Everything runs under one lock: concurrent calls are serialized.
On start, :meth:`Driver.reconcile` makes the CDI directory agree with the checkpoint.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeacc.agent.dra import DRIVER_NAME, cdi
from kubeacc.agent.dra.checkpoint import Checkpoint, PreparedClaim, PreparedDevice
from kubeacc.agent.dra.claims import ClaimSource
from kubeacc.agent.dra.config import ConfigError, FpgaConfig, config_env, parse_config
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.hooks import pause_point

log = logging.getLogger(__name__)

#: (device name, bitstream name, "sha256:<hex>") -> what was done; raises when refused.
FpgaProgrammer = Callable[[str, str, str], str]


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


@dataclass
class PrepareResult:
    devices: list[PreparedDevice] = field(default_factory=list)
    error: str = ""


class ClaimError(Exception):
    """This claim cannot be prepared here; the message goes back to the kubelet."""


class Driver:
    def __init__(
        self,
        node: str,
        claims: ClaimSource,
        devices: Callable[[], Mapping[str, DeviceInfo]],
        *,
        cdi_dir: Path,
        state_dir: Path,
        host_root: Path = Path("/"),
        fpga: FpgaProgrammer | None = None,
    ) -> None:
        self.node = node
        self.fpga = fpga
        self.claims = claims
        self.devices = devices
        self.cdi_dir = cdi_dir
        self.state_dir = state_dir
        self.host_root = host_root
        self.lock = threading.Lock()
        cdi_dir.mkdir(parents=True, exist_ok=True)
        state_dir.mkdir(parents=True, exist_ok=True)
        self.checkpoint = Checkpoint(state_dir)
        self.checkpoint.load()

    # -- start-up ---------------------------------------------------------------------------
    def reconcile(self) -> tuple[list[str], list[str]]:
        """Remove CDI specs of claims not in the checkpoint; rewrite missing ones.

        Returns (removed, rewritten) claim UIDs.
        """
        with self.lock:
            for d in (self.cdi_dir, self.state_dir):
                for tmp in d.glob(".*.tmp"):  # interrupted atomic writes
                    tmp.unlink(missing_ok=True)
            on_disk = cdi.spec_uids(self.cdi_dir)
            removed = sorted(on_disk - self.checkpoint.claims.keys())
            for uid in removed:
                cdi.remove_spec(self.cdi_dir, uid)
            rewritten = []
            for uid, claim in self.checkpoint.claims.items():
                path = cdi.spec_path(self.cdi_dir, uid)
                if uid not in on_disk or _read(path) != claim.cdi_spec:
                    cdi.write_spec(self.cdi_dir, uid, claim.cdi_spec)
                    rewritten.append(uid)
        if removed or rewritten:
            log.info("reconciled CDI specs: removed %s, rewrote %s", removed, rewritten)
        return removed, rewritten

    # -- prepare ----------------------------------------------------------------------------
    def prepare(self, refs: Iterable[ClaimRef]) -> dict[str, PrepareResult]:
        out: dict[str, PrepareResult] = {}
        with self.lock:
            new: dict[str, PreparedClaim] = {}
            for ref in refs:
                done = self.checkpoint.claims.get(ref.uid) or new.get(ref.uid)
                if done is not None:
                    out[ref.uid] = PrepareResult(devices=done.devices)
                    continue
                try:
                    prepared = self._prepare_one(ref)
                except ClaimError as exc:
                    log.warning("prepare %s/%s (%s): %s", ref.namespace, ref.name, ref.uid, exc)
                    out[ref.uid] = PrepareResult(error=str(exc))
                    continue
                except Exception as exc:  # API server away, disk full, ...
                    log.exception("prepare %s/%s failed", ref.namespace, ref.name)
                    out[ref.uid] = PrepareResult(error=f"prepare failed: {exc}")
                    continue
                new[ref.uid] = prepared
                out[ref.uid] = PrepareResult(devices=prepared.devices)
            if new:
                pause_point("prepare-after-cdi", self.state_dir)
                try:
                    self.checkpoint.record_prepare(new)
                except OSError as exc:
                    log.exception("checkpoint write failed")
                    for uid in new:
                        cdi.remove_spec(self.cdi_dir, uid)
                        out[uid] = PrepareResult(error=f"checkpoint write failed: {exc}")
                    return out
                pause_point("prepare-after-checkpoint", self.state_dir)
        return out

    def _prepare_one(self, ref: ClaimRef) -> PreparedClaim:
        claim = self.claims.get(ref.namespace, ref.name, ref.uid)
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        if claim is None:
            raise ClaimError(f"{where} not found")
        uid = claim.get("metadata", {}).get("uid")
        if uid != ref.uid:
            raise ClaimError(f"{where} has UID {uid}, the kubelet asked for {ref.uid}")
        alloc = (claim.get("status") or {}).get("allocation")
        if not alloc:
            raise ClaimError(f"{where} is not allocated")
        results = [
            r for r in alloc.get("devices", {}).get("results", []) if r["driver"] == DRIVER_NAME
        ]
        if not results:
            raise ClaimError(f"{where} has no devices of driver {DRIVER_NAME}")
        known = self.devices()
        configs = _configs(alloc.get("devices", {}).get("config", []))
        cdi_devices: list[cdi.CDIDevice] = []
        prepared: list[PreparedDevice] = []
        recorded: dict[str, Any] = {}
        for r in results:
            dev_name, pool = r["device"], r["pool"]
            if pool != self.node:
                raise ClaimError(
                    f"{where}: device {dev_name} is allocated from pool {pool!r}, "
                    f"not from this node's pool {self.node!r}"
                )
            info = known.get(dev_name)
            if info is None:
                raise ClaimError(f"{where}: device {dev_name} is not published by this node")
            env: dict[str, str] = {}
            for requests, params in configs:
                if requests and not _applies(r["request"], requests):
                    continue
                try:
                    cfg = parse_config(params)
                except ConfigError as exc:
                    raise ClaimError(f"{where}: {exc}") from None
                if info.type != cfg.DEVICE_TYPE:
                    raise ClaimError(
                        f"{where}: {cfg.kind} does not apply to {info.type} device {dev_name} "
                        f"(request {r['request']})"
                    )
                if isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
                    self._program(where, dev_name, cfg.bitstream.name, cfg.bitstream.digest)
                env.update(config_env(cfg))
                recorded[dev_name] = cfg.model_dump(mode="json", by_alias=True)
            cdi_devices.append(cdi.CDIDevice(dev_name, info.bus_id, info.device_nodes, env))
            prepared.append(
                PreparedDevice(
                    request_names=[r["request"]],
                    pool=pool,
                    device=dev_name,
                    cdi_device_ids=[cdi.device_id(ref.uid, dev_name)],
                )
            )
        spec = cdi.build_spec(ref.uid, f"{ref.namespace}/{ref.name}", cdi_devices, self.host_root)
        cdi.write_spec(self.cdi_dir, ref.uid, spec)
        return PreparedClaim(ref.namespace, ref.name, prepared, spec, recorded)

    def _program(self, where: str, device: str, bitstream: str, digest: str) -> None:
        """Load the claim's bitstream before the container may use the FPGA."""
        if self.fpga is None:
            raise ClaimError(
                f"{where}: FpgaConfig names bitstream {bitstream}, but this agent has no "
                "bitstream library (--bitstream-dir)"
            )
        try:
            done = self.fpga(device, bitstream, digest)
        except Exception as exc:  # ProgrammingRefused, or the API server being away
            raise ClaimError(f"{where}: device {device}: {exc}") from None
        log.info("%s: %s", where, done)

    # -- unprepare --------------------------------------------------------------------------
    def unprepare(self, refs: Iterable[ClaimRef]) -> dict[str, str]:
        """Forget the claims; needs no API server. Returns uid -> error ("" = done)."""
        out: dict[str, str] = {}
        with self.lock:
            uids = [r.uid for r in refs]
            present = [u for u in uids if u in self.checkpoint.claims]
            try:
                if present:
                    self.checkpoint.record_unprepare(present)
                    pause_point("unprepare-after-checkpoint", self.state_dir)
                for uid in uids:
                    cdi.remove_spec(self.cdi_dir, uid)
                pause_point("unprepare-after-cdi", self.state_dir)
            except OSError as exc:
                log.exception("unprepare failed")
                return {uid: f"unprepare failed: {exc}" for uid in uids}
            out = dict.fromkeys(uids, "")
        return out

    def prepared(self) -> dict[str, PreparedClaim]:
        with self.lock:
            return dict(self.checkpoint.claims)


def _configs(entries: list[dict[str, Any]]) -> list[tuple[list[str], Any]]:
    """Our opaque configs in precedence order: class configs first, then the claim's."""
    ours = [e for e in entries if (e.get("opaque") or {}).get("driver") == DRIVER_NAME]
    ours.sort(key=lambda e: 0 if e.get("source") == "FromClass" else 1)
    return [(e.get("requests") or [], e["opaque"].get("parameters")) for e in ours]


def _applies(request: str, requests: list[str]) -> bool:
    """A config naming ``req`` applies to ``req`` and its sub-requests ``req/sub``."""
    return request in requests or request.split("/", 1)[0] in requests


def _read(path: Path) -> Any:
    import json

    try:
        return json.loads(path.read_bytes())
    except (OSError, ValueError):
        return None
