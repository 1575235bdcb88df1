"""The life-cycle agent on a Cyborg node: its devices are Cyborg's, FPGA programming is Cyborg's.

With ``kubeacc lifecycle-agent --inventory cyborg`` the node's Accelerators are the units of the
deployables Cyborg reports for the node (:class:`~kubeacc.node.cyborg.inventory.CyborgInventory`,
every unit, named as the node agent publishes them), and an operation on one of them is carried
out through Cyborg where Cyborg has the action:

``Program``: the same checks as on a host, in the same order, before anything leaves the node:
the bitstream's digest allowed by the device's policies, the file in the node's bitstream
library with that SHA-256 and a GBS header, built for the FIM the deployable's region trait
names. Then the deployable must be free: no allocation in Placement (a claim of kube-acc or a
Nova server). Then the bitstream's image in Glance (uploaded once, found again by its digest),
Cyborg's program API on the deployable (its agent downloads the image and runs the vendor's
tool), and the wait until Cyborg reports the bitstream's AFU in the deployable's function trait
(its agent reports its devices once a minute). Every unit of the deployable is reprogrammed.

Other actions act on the host's functions (reset, power, vfio-pci) or a GPU's driver (MIG mode),
which Cyborg does not offer: they fail with ``NotSupportedByCyborg``. ``Drain`` and
``Uncordon`` are the controller's and need nothing of the node.
"""

from __future__ import annotations

import time
from collections.abc import Callable

from kubeacc.crds.api import Action
from kubeacc.crds.views import OperationSpecView
from kubeacc.host.files import HostReadError
from kubeacc.host.kernel import HostError
from kubeacc.model import Device, DeviceType
from kubeacc.node.cyborg.client import (
    CyborgClient,
    CyborgError,
    CyborgRefused,
    CyborgUnavailable,
)
from kubeacc.node.cyborg.glance import GlanceImages
from kubeacc.node.cyborg.inventory import (
    FUNCTION_TRAIT,
    REGION_TRAIT,
    CyborgInventory,
    deployable_traits,
    trait_id,
)
from kubeacc.node.operations.bitstreams import BitstreamLibrary, check_allowed
from kubeacc.node.operations.outcome import Outcome

#: How long Cyborg may take to report the new AFU (its agent reports every 60 s).
AFU_REPORT_S = 90.0


def _unanswered(exc: CyborgUnavailable) -> bool:
    """The program request got no verdict: timed out here, or Cyborg's API timed out waiting
    for its agent (oslo.messaging's ``MessagingTimeout``), as opposed to an answer."""
    text = str(exc)
    return "timed out" in text or "MessagingTimeout" in text or "Timed out waiting" in text


class CyborgOperations:
    """Discovery and actions of a Cyborg node's life-cycle agent (module doc)."""

    def __init__(
        self,
        client: CyborgClient,
        inventory: CyborgInventory,
        library: BitstreamLibrary,
        images: Callable[[], GlanceImages],
        *,
        afu_report_s: float = AFU_REPORT_S,
        poll_s: float = 1.0,
    ) -> None:
        self.client = client
        self.inventory = inventory
        self.library = library
        self.images = images
        self.afu_report_s = afu_report_s
        self.poll_s = poll_s

    def discover(self) -> dict[str, Device]:
        """The node's units now; HostReadError when Cyborg or Placement did not answer whole
        (the agent's Accelerators stay as they are)."""
        try:
            found = self.inventory.discover()
        except CyborgError as exc:
            raise HostReadError(f"Cyborg's devices of this node not read: {exc}") from None
        return {d.name: d for d in found.devices}

    def run(self, spec: OperationSpecView, device: Device, *, allowed_digests: set[str]) -> Outcome:
        match spec.action:
            case Action.DRAIN | Action.UNCORDON:
                return Outcome(True, "Nothing", "the controller's action; nothing on the node")
            case Action.PROGRAM if spec.program is not None:
                try:
                    return self.program(
                        device, spec.program.bitstream, spec.program.sha256, allowed_digests
                    )
                except HostError as exc:
                    return Outcome(False, exc.reason, exc.message)
            case Action.PROGRAM:
                return Outcome(False, "InvalidSpec", "spec.program is required for action Program")
        return Outcome(
            False,
            "NotSupportedByCyborg",
            f"{spec.action} is not an action Cyborg offers; {device.name} is Cyborg's device "
            "(docs/cyborg.md)",
        )

    def program(
        self, device: Device, bitstream: str, sha256: str, allowed_digests: set[str]
    ) -> Outcome:
        if device.type is not DeviceType.FPGA:
            raise HostError("NotAnFPGA", f"{device.name} is not an FPGA")
        check_allowed(device.name, bitstream, sha256, allowed_digests)
        data, image = self.library.read(bitstream, sha256)
        deployable = str(device.attributes.get("cyborgDeployable") or "")
        rp_uuid = str(device.attributes.get("resourceProvider") or "")
        if not deployable or not rp_uuid:
            raise HostError("NotACyborgDevice", f"{device.name} names no Cyborg deployable")
        try:
            images = self.images()
        except CyborgError as exc:
            raise HostError("GlanceNotConfigured", str(exc)) from None
        try:
            return self._program(
                images,
                device,
                bitstream,
                image.afu_id,
                image.interface_id,
                deployable,
                rp_uuid,
                sha256,
                data,
            )
        except CyborgError as exc:
            reason = "ServiceRefused" if isinstance(exc, CyborgRefused) else "ServiceUnavailable"
            return Outcome(False, reason, f"{bitstream} not programmed into {device.name}: {exc}")

    def _program(
        self,
        images: GlanceImages,
        device: Device,
        bitstream: str,
        afu: str,
        interface: str | None,
        deployable: str,
        rp_uuid: str,
        sha256: str,
        data: bytes,
    ) -> Outcome:
        dep = self.client.deployable(deployable)
        region = trait_id(deployable_traits(dep), REGION_TRAIT)
        if interface and region and interface != region:
            raise HostError(
                "IncompatibleBitstream",
                f"{bitstream} was built for FIM {interface}, Cyborg's deployable {deployable} "
                f"has {region}",
            )
        users = sorted(self.client.provider_allocations(rp_uuid))
        if users:
            raise HostError(
                "DeviceInUse",
                f"Cyborg's deployable {deployable} ({device.name}) is allocated in Placement to "
                f"{', '.join(users)}; drain it first (spec.drainFirst)",
            )
        image, uploaded = images.ensure(sha256, data)
        how = "uploaded to" if uploaded else "found in"
        unanswered = ""
        try:
            self.client.program(deployable, image)
        except CyborgUnavailable as exc:
            if not _unanswered(exc):
                raise
            # Cyborg's API gave up waiting for its agent (or kube-acc for the API): the tool
            # may still have loaded the bitstream, which Cyborg's next report shows
            unanswered = str(exc)
        deadline = time.monotonic() + self.afu_report_s
        while True:
            got = trait_id(deployable_traits(self.client.deployable(deployable)), FUNCTION_TRAIT)
            if got == afu:
                return Outcome(
                    True,
                    "Programmed",
                    f"{bitstream} ({how} Glance as image {image}) loaded by Cyborg into "
                    f"deployable {deployable}"
                    + (f" (its program API did not answer: {unanswered})" if unanswered else "")
                    + f"; Cyborg reports AFU {got}",
                    afu_id=got,
                )
            if unanswered and time.monotonic() >= deadline:
                raise CyborgUnavailable(
                    f"Cyborg's program API did not answer and after {self.afu_report_s:.0f} s "
                    f"deployable {deployable} reports AFU {got}: {unanswered}"
                )
            if time.monotonic() >= deadline:
                return Outcome(
                    False,
                    "AFUMismatch",
                    f"Cyborg programmed {bitstream} into deployable {deployable}, but after "
                    f"{self.afu_report_s:.0f} s it reports AFU {got}, expected {afu}",
                )
            time.sleep(self.poll_s)
