"""FPGAs as a device kind: a claim's bitstream (its ``FpgaConfig``) is on the card before the
container may use it, loaded at prepare or, when loaded before binding (:mod:`.binding`),
checked there; a claim asked for again (a node reboot can clear a card) is checked again."""

from __future__ import annotations

import logging
from collections.abc import Callable

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.agent.dra.fpga.conditions import PROGRAMMED, NotProgrammed
from kubeacc.agent.dra.kind import ClaimError, DeviceWork, Kind
from kubeacc.agent.dra.refs import ClaimRef
from kubeacc.crds.opaque import ConfigError, FpgaConfig, parse_config

log = logging.getLogger(__name__)

#: (device name, bitstream name, "sha256:<hex>") -> what was done; raises when refused.
FpgaProgrammer = Callable[[str, str, str], str]


class FpgaKind(Kind):
    """``program`` loads a bitstream (None: no bitstream library, such configs are refused);
    ``verify`` checks a bitstream loaded before binding (None: load it at prepare)."""

    def __init__(self, program: FpgaProgrammer | None, verify: FpgaProgrammer | None) -> None:
        self.program = program
        self.verify = verify

    def prepare(self, dev: DeviceWork) -> None:
        for cfg, _ in dev.configs:
            if isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
                bitstream = (dev.info.name, cfg.bitstream.name, cfg.bitstream.digest)
                if PROGRAMMED in (dev.result.get("bindingConditions") or []):
                    self._verify(dev.where, *bitstream)
                else:
                    self._program(dev.where, *bitstream)

    def again(self, ref: ClaimRef, done: PreparedClaim) -> str:
        """A prepared claim's FPGAs still carry their bitstreams, or are programmed again: the
        kubelet asks again for the pods it restarts, and a container must not start on an empty
        card. The error, or ""."""
        if self.verify is None:
            return ""
        where = f"ResourceClaim {ref.namespace}/{ref.name}"
        for device, params in done.config.items():
            try:
                cfg = parse_config(params)
            except ConfigError:
                continue  # recorded by this agent: never happens
            if isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
                try:
                    self._verify(where, device, cfg.bitstream.name, cfg.bitstream.digest)
                except ClaimError as exc:
                    log.warning("prepare %s (%s): %s", where, ref.uid, exc)
                    return str(exc)
        return ""

    def _program(self, where: str, device: str, bitstream: str, digest: str) -> None:
        """Load the claim's bitstream before the container may use the FPGA."""
        if self.program is None:
            raise ClaimError(
                f"{where}: FpgaConfig names bitstream {bitstream}, but this agent has no "
                "bitstream library (--bitstream-dir)"
            )
        try:
            done = self.program(device, bitstream, digest)
        except Exception as exc:  # ProgrammingRefused, or the API server being away
            raise ClaimError(f"{where}: device {device}: {exc}") from None
        log.info("%s: %s", where, done)

    def _verify(self, where: str, device: str, bitstream: str, digest: str) -> None:
        """The bitstream was loaded before binding: check the card carries it. Should the
        scheduler not have waited for the condition (its gate off while the API server's is
        on), load it now rather than fail the pod."""
        if self.verify is None:
            self._program(where, device, bitstream, digest)
            return
        try:
            done = self.verify(device, bitstream, digest)
        except NotProgrammed as exc:
            log.warning("%s: %s; loading it now", where, exc)
            self._program(where, device, bitstream, digest)
            return
        except Exception as exc:
            raise ClaimError(f"{where}: device {device}: {exc}") from None
        log.info("%s: %s", where, done)
