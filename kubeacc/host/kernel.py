"""The kernel operations kube-acc does on a node: sysfs attribute writes and the FPGA PR ioctl.

Part of the host seam (:mod:`kubeacc.host.interface`). Paths are host-absolute
(``/sys/bus/pci/...``) and resolved under the host root. ``LinuxKernel`` does the real thing; a
synthetic host's kernel emulates what the kernel would make appear in its tree (driver links move
on bind/unbind, a new ``afu_id`` after PR).
"""

from __future__ import annotations

import ctypes
import fcntl
import os
import struct
from pathlib import Path
from typing import Protocol

import msgspec

from kubeacc.model import Device, FPGADriver

#: ``_IO(DFL_FPGA_MAGIC=0xB6, DFL_FME_BASE=0x80 + 0)``: DFL_FPGA_FME_PORT_PR (linux/fpga-dfl.h);
#: the out-of-tree OPAE driver's FPGA_FME_PORT_PR has the same number.
FME_PORT_PR = (0xB6 << 8) | 0x80


class HostError(Exception):
    """A host operation failed; ``reason`` is a CamelCase condition reason."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason
        self.message = message


class FpgaPort(msgspec.Struct, frozen=True):
    """Where an FPGA is reprogrammed: the FME character device and the port's sysfs directory."""

    driver: FPGADriver
    fme_dev: str
    port_sysfs: str
    port_id: int = 0

    @classmethod
    def of(cls, device: Device) -> FpgaPort:
        fpga = device.fpga
        if fpga is None or fpga.driver not in (FPGADriver.DFL, FPGADriver.OPAE) or not fpga.ports:
            raise HostError(
                "PartialReconfigurationUnsupported",
                f"{device.name}: partial reconfiguration needs a DFL or OPAE FPGA with a port",
            )
        fme = [n for n in device.device_nodes if "fme" in n.rsplit("/", 1)[-1]]
        if not fme:
            raise HostError("NoFMEDevice", f"{device.name}: no FME device node found")
        return cls(
            driver=fpga.driver,
            fme_dev=fme[0],
            port_sysfs=f"/sys/bus/platform/devices/{fpga.ports[0]}",
        )


class FpgaImage(msgspec.Struct, frozen=True):
    """A verified partial bitstream: the AFU it carries, the FIM it needs, the raw payload."""

    name: str
    sha256: str
    afu_id: str
    interface_id: str | None
    payload: bytes


class HostKernel(Protocol):
    root: Path

    def write(self, path: str, value: str) -> None:
        """Write ``value`` to a sysfs attribute (host-absolute path)."""
        ...

    def fpga_program(self, port: FpgaPort, image: FpgaImage) -> None:
        """Partially reconfigure the FPGA behind ``port`` with ``image``."""
        ...


def host_path(root: Path, path: str) -> Path:
    return root / path.lstrip("/")


class LinuxKernel:
    """The real kernel interfaces under ``root`` (``/`` on a node)."""

    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def write(self, path: str, value: str) -> None:
        target = host_path(self.root, path)
        try:
            with open(target, "w") as fh:
                fh.write(value)
        except OSError as exc:
            raise HostError(
                "SysfsWriteFailed", f"writing {value.strip()!r} to {path}: {exc}"
            ) from exc

    def fpga_program(self, port: FpgaPort, image: FpgaImage) -> None:
        buf = ctypes.create_string_buffer(image.payload, len(image.payload))
        addr = ctypes.addressof(buf)
        if port.driver is FPGADriver.DFL:
            # struct dfl_fpga_fme_port_pr {
            #     u32 argsz, flags, port_id, buffer_size; u64 buffer_address; }
            arg = struct.pack("=IIIIQ", 24, 0, port.port_id, len(image.payload), addr)
        else:
            # struct fpga_fme_port_pr { ... as above ...; u64 status; }
            arg = struct.pack("=IIIIQQ", 32, 0, port.port_id, len(image.payload), addr, 0)
        dev = host_path(self.root, port.fme_dev)
        try:
            fd = os.open(dev, os.O_RDWR)
        except OSError as exc:
            raise HostError("FMEOpenFailed", f"opening {port.fme_dev}: {exc}") from exc
        try:
            fcntl.ioctl(fd, FME_PORT_PR, bytearray(arg))
        except OSError as exc:
            raise HostError(
                "PartialReconfigurationFailed", f"FPGA_FME_PORT_PR on {port.fme_dev}: {exc}"
            ) from exc
        finally:
            os.close(fd)
