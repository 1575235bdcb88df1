"""Carry out one operation on one device of this node, through the host kernel interfaces.

Every action checks what it can before touching the host and verifies the result afterwards;
an action that fails half-way undoes the steps it had done (a failed vfio-pci bind rebinds the
host driver), so a Failed result never leaves the device in between.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from kubeacc.crds.api import Action, PowerState
from kubeacc.crds.views import OperationSpecView
from kubeacc.host import Host
from kubeacc.host.kernel import FpgaPort, HostError, HostKernel, host_path
from kubeacc.model import Device, DeviceType
from kubeacc.node.operations.bitstreams import BitstreamLibrary, check_allowed
from kubeacc.node.operations.migmode import set_mig_mode
from kubeacc.node.operations.outcome import Outcome

log = logging.getLogger(__name__)

VFIO = "vfio-pci"
T = TypeVar("T")

PCI_DEVICES = "/sys/bus/pci/devices"
PCI_DRIVERS = "/sys/bus/pci/drivers"


def _required(section: T | None, name: str, action: str) -> T:
    """The spec's section ``name`` that ``action`` needs (the CRD's rules require it; an old
    CRD does not)."""
    if section is None:
        raise HostError("InvalidSpec", f"spec.{name} is required for action {action}")
    return section


class Executor:
    def __init__(
        self,
        host: Host,
        library: BitstreamLibrary,
        rediscover: Callable[[str], Device | None],
    ) -> None:
        self.host = host
        self.library = library
        self.rediscover = rediscover

    @property
    def root(self) -> Path:
        return self.host.root

    @property
    def kernel(self) -> HostKernel:
        return self.host.kernel

    def run(
        self,
        spec: OperationSpecView,
        device: Device,
        *,
        host_driver: str | None,
        allowed_digests: set[str],
    ) -> Outcome:
        try:
            match spec.action:
                case Action.RESET:
                    return self.reset(device)
                case Action.POWER:
                    state = _required(spec.power, "power", spec.action).state
                    return self.power(device, PowerState(state))
                case Action.ATTACH:
                    return self.attach(device)
                case Action.DETACH:
                    want = (spec.detach.driver if spec.detach else None) or host_driver
                    return self.detach(device, want)
                case Action.PROGRAM:
                    image = _required(spec.program, "program", spec.action)
                    return self.program(device, image.bitstream, image.sha256, allowed_digests)
                case Action.MIG_MODE:
                    enabled = _required(spec.mig_mode, "migMode", spec.action).enabled
                    return set_mig_mode(self.host, device, enabled, self.reset)
                case Action.DRAIN | Action.UNCORDON:
                    return Outcome(True, "Nothing", "the controller's action; nothing on the node")
        except HostError as exc:
            return Outcome(False, exc.reason, exc.message)
        return Outcome(False, "UnknownAction", f"action {spec.action} is not implemented")

    # -- PCI ---------------------------------------------------------------------------------
    def _bdf(self, device: Device) -> str:
        if device.pci is None:
            raise HostError("NotAPCIDevice", f"{device.name} has no PCI function")
        return device.pci.bus_id

    def _current_driver(self, bdf: str) -> str | None:
        link = host_path(self.root, f"{PCI_DEVICES}/{bdf}/driver")
        return os.path.basename(os.readlink(link)) if link.is_symlink() else None

    def reset(self, device: Device) -> Outcome:
        bdf = self._bdf(device)
        if not host_path(self.root, f"{PCI_DEVICES}/{bdf}/reset").exists():
            raise HostError(
                "ResetUnsupported", f"{bdf} has no function-level reset (no reset file)"
            )
        self.kernel.write(f"{PCI_DEVICES}/{bdf}/reset", "1")
        return Outcome(True, "Reset", f"function {bdf} reset")

    def power(self, device: Device, state: PowerState) -> Outcome:
        bdf = self._bdf(device)
        if state in (PowerState.OFF, PowerState.CYCLE):
            self.kernel.write(f"{PCI_DEVICES}/{bdf}/remove", "1")
        if state in (PowerState.ON, PowerState.CYCLE):
            self.kernel.write("/sys/bus/pci/rescan", "1")
        return Outcome(True, f"Power{state.value}", f"{bdf}: power {state.value.lower()}")

    def _bind(self, bdf: str, driver: str) -> None:
        if not host_path(self.root, f"{PCI_DRIVERS}/{driver}/bind").exists():
            raise HostError("DriverNotLoaded", f"driver {driver} is not loaded on this node")
        self.kernel.write(f"{PCI_DRIVERS}/{driver}/bind", bdf)
        now = self._current_driver(bdf)
        if now != driver:
            raise HostError("BindFailed", f"{bdf} is bound to {now or 'nothing'}, not {driver}")

    def _unbind(self, bdf: str, driver: str | None) -> None:
        if driver:
            self.kernel.write(f"{PCI_DRIVERS}/{driver}/unbind", bdf)

    def attach(self, device: Device) -> Outcome:
        """Hand the function to vfio-pci (for passthrough to a VM)."""
        bdf = self._bdf(device)
        before = self._current_driver(bdf)
        if before == VFIO:
            return Outcome(True, "Attached", f"{bdf} already bound to {VFIO}", driver=VFIO)
        if not host_path(self.root, f"{PCI_DEVICES}/{bdf}/iommu_group").exists():
            raise HostError("NoIOMMUGroup", f"{bdf} has no IOMMU group; vfio-pci cannot take it")
        if not host_path(self.root, f"{PCI_DRIVERS}/{VFIO}/bind").exists():
            raise HostError("DriverNotLoaded", f"driver {VFIO} is not loaded on this node")
        self.kernel.write(f"{PCI_DEVICES}/{bdf}/driver_override", VFIO)
        try:
            self._unbind(bdf, before)
            self._bind(bdf, VFIO)
        except HostError as exc:
            self._rollback(bdf, before)
            raise HostError(exc.reason, f"{exc.message}; restored {before or 'no driver'}") from exc
        return Outcome(True, "Attached", f"{bdf} bound to {VFIO} (was {before})", driver=VFIO)

    def detach(self, device: Device, driver: str | None) -> Outcome:
        """Give the function back to its host driver."""
        bdf = self._bdf(device)
        before = self._current_driver(bdf)
        if not driver:
            raise HostError(
                "NoHostDriver", f"{bdf}: no host driver recorded; set spec.detach.driver"
            )
        if before == driver:
            return Outcome(True, "Detached", f"{bdf} already bound to {driver}", driver=driver)
        if not host_path(self.root, f"{PCI_DRIVERS}/{driver}/bind").exists():
            raise HostError("DriverNotLoaded", f"driver {driver} is not loaded on this node")
        self.kernel.write(f"{PCI_DEVICES}/{bdf}/driver_override", "\n")
        try:
            self._unbind(bdf, before)
            self._bind(bdf, driver)
        except HostError as exc:
            if before == VFIO:
                self.kernel.write(f"{PCI_DEVICES}/{bdf}/driver_override", VFIO)
            self._rollback(bdf, before)
            raise HostError(exc.reason, f"{exc.message}; restored {before or 'no driver'}") from exc
        return Outcome(True, "Detached", f"{bdf} bound to {driver} (was {before})", driver=driver)

    def _rollback(self, bdf: str, driver: str | None) -> None:
        try:
            now = self._current_driver(bdf)
            if now == driver:
                return
            if driver != VFIO:
                self.kernel.write(f"{PCI_DEVICES}/{bdf}/driver_override", "\n")
            self._unbind(bdf, now)
            if driver:
                self.kernel.write(f"{PCI_DRIVERS}/{driver}/bind", bdf)
        except HostError as exc:
            log.error("rollback of %s to %s failed: %s", bdf, driver, exc)

    # -- FPGA --------------------------------------------------------------------------------
    def program(
        self, device: Device, bitstream: str, sha256: str, allowed_digests: set[str]
    ) -> Outcome:
        if device.type is not DeviceType.FPGA or device.fpga is None:
            raise HostError("NotAnFPGA", f"{device.name} is not an FPGA")
        check_allowed(device.name, bitstream, sha256, allowed_digests)
        image = self.library.load(bitstream, sha256)
        want_iface = device.fpga.interface_id
        if image.interface_id and want_iface and image.interface_id != want_iface:
            raise HostError(
                "IncompatibleBitstream",
                f"{bitstream} was built for FIM {image.interface_id}, "
                f"{device.name} has {want_iface}",
            )
        port = FpgaPort.of(device)
        self.kernel.fpga_program(port, image)
        after = self.rediscover(device.name)
        got = after.fpga.afu_id if after and after.fpga else None
        if got != image.afu_id:
            raise HostError(
                "AFUMismatch",
                f"after programming {bitstream}, {device.name} reports AFU {got}, expected "
                f"{image.afu_id}",
            )
        return Outcome(True, "Programmed", f"{bitstream} loaded; AFU {got}", afu_id=got)
