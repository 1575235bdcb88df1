"""Programming an FPGA when a DRA claim asks for a bitstream (``FpgaConfig`` opaque config).

The answer to "program on demand": NodePrepareResources finds a bitstream in the claim's
config, and before the CDI spec is written the FPGA region is programmed with it, unless it
already carries that AFU. The checks are the life-cycle operation's: the bitstream comes from
the node-local library by a name that can't escape it, its digest must match, an
AcceleratorPolicy that selects the device must allow the digest, and it must be built for the
card's FPGA interface (FIM). A refusal is the claim's per-claim error; nothing is half-applied.

Where the cluster keeps binding conditions the bitstream is loaded before the pod is bound
(:mod:`kubeacc.agent.dra.fpga.binding`, through :meth:`ClaimProgrammer.ensure` as well) and prepare
only calls :meth:`ClaimProgrammer.verify`.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from kubeacc.agent.dra.fpga.conditions import NotProgrammed
from kubeacc.crds.policyread import allowed_bitstream_digests
from kubeacc.discovery import discover
from kubeacc.host import Host
from kubeacc.host.kernel import FpgaImage, HostError
from kubeacc.model import Device, FPGAState
from kubeacc.node.operations.bitstreams import BitstreamLibrary
from kubeacc.node.operations.executor import Executor

log = logging.getLogger(__name__)


class ProgrammingRefused(Exception):
    """The bitstream can't be loaded on this device; the message says why."""


class ClaimProgrammer:
    def __init__(
        self,
        host: Host,
        bitstream_dir: Path,
        policies: Callable[[], list[dict[str, Any]]],
    ) -> None:
        self.host = host
        self.policies = policies
        self.library = BitstreamLibrary(bitstream_dir)
        self.executor = Executor(host, self.library, self._device)
        self._lock = threading.Lock()

    def _device(self, name: str) -> Device | None:
        for dev in discover(self.host).devices:
            if dev.name == name:
                return dev
        return None

    def _card_and_image(
        self, device_name: str, bitstream: str, digest: str
    ) -> tuple[Device, FPGAState, FpgaImage, set[str]]:
        """The FPGA ``device_name`` of this node (device and its FPGA facts), the library's
        image of the bitstream and the digests the policies of the device allow; raises
        :class:`ProgrammingRefused` for either missing or a digest no policy allows.

        The allow-list comes first: the claim's name and digest are a namespace user's, and
        the library is read (whole, up to its size limit) only for a bitstream an admin
        allowed; a name of any large library file would otherwise make the agent read it."""
        device = self._device(device_name)
        if device is None or device.fpga is None:
            raise ProgrammingRefused(f"{device_name} is not an FPGA on this node")
        sha256 = digest.removeprefix("sha256:")
        allowed = allowed_bitstream_digests(self.policies(), device)
        if sha256 not in allowed:
            raise ProgrammingRefused(
                f"BitstreamNotAllowed: {bitstream} (sha256 {sha256[:12]}…) is not allowed "
                f"by the AcceleratorPolicies that select {device_name}"
            )
        try:
            image = self.library.load(bitstream, sha256)
        except HostError as err:
            raise ProgrammingRefused(f"{err.reason}: {err}") from None
        return device, device.fpga, image, allowed

    def verify(self, device_name: str, bitstream: str, digest: str) -> str:
        """Check that ``device_name`` carries the bitstream (loaded before binding,
        kubeacc.agent.dra.fpga.binding); raises :class:`NotProgrammed` when it does not."""
        with self._lock:
            _, fpga, image, _ = self._card_and_image(device_name, bitstream, digest)
            if fpga.afu_id != image.afu_id:
                raise NotProgrammed(
                    f"NotProgrammed: {device_name} carries AFU {fpga.afu_id or 'none'}, "
                    f"not {image.afu_id} of {bitstream}"
                )
            return f"{device_name} carries AFU {image.afu_id} of {bitstream}"

    def ensure(self, device_name: str, bitstream: str, digest: str) -> str:
        """Program ``device_name`` with the bitstream unless it carries it already.

        Returns what was done, for the log; raises :class:`ProgrammingRefused`.
        """
        sha256 = digest.removeprefix("sha256:")
        with self._lock:  # one reconfiguration at a time on this node
            device, fpga, image, allowed = self._card_and_image(device_name, bitstream, digest)
            if fpga.afu_id == image.afu_id:
                return f"{device_name} already carries AFU {image.afu_id}"
            try:
                outcome = self.executor.program(device, bitstream, sha256, allowed)
            except HostError as err:
                raise ProgrammingRefused(f"{err.reason}: {err}") from None
            if not outcome.ok:
                raise ProgrammingRefused(f"{outcome.reason}: {outcome.message}")
            log.info("programmed %s with %s: %s", device_name, bitstream, outcome.message)
            return outcome.message
