"""What the kernel would do to a synthetic host tree when the life-cycle agent writes to it.

``SyntheticKernel`` implements the agent's ``HostKernel`` boundary for a tree built by
``kubeacc.synthetic``: writes land in the files (so tests can read what was written), and the
side effects the real kernel has become visible the way they would on a node:

* ``drivers/<drv>/unbind`` removes the ``driver`` link and the driver's back link;
* ``drivers/<drv>/bind`` creates them, unless ``driver_override`` names another driver
  (the real kernel answers ENODEV then);
* ``driver_override`` reads back as written, ``(null)`` when cleared;
* the FME PR ioctl makes the new AFU id appear in the port's ``afu_id``, after as many seconds
  as ``/.synthetic/fpga-pr-seconds`` says (absent: at once), as a real partial reconfiguration
  takes seconds.

Every hardware action (a function-level reset, a PCI remove, a partial reconfiguration) is
also appended to ``/.synthetic/kernel-actions.jsonl`` before it takes effect, one JSON object a
line (``action``, ``device``, ``detail``, ``pid``), one ``write`` under O_APPEND: the count of
what was done to the host, for checks that nothing was done twice (the fault runner's
operations, across processes and restarts). :func:`actions` reads it back.

``modules`` names drivers to "load" (create under ``/sys/bus/pci/drivers``), vfio-pci by default.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path
from typing import Any

from kubeacc.host.kernel import FpgaImage, FpgaPort, HostError, host_path
from kubeacc.synthetic.mig_state import reset_gpu_at

PCI = "/sys/bus/pci"
#: How long a partial reconfiguration takes on the synthetic host (seconds, a float).
PR_SECONDS_FILE = ".synthetic/fpga-pr-seconds"
#: The record of hardware actions (module docstring).
ACTIONS_FILE = ".synthetic/kernel-actions.jsonl"


def record_action(root: Path, action: str, device: str, detail: str) -> None:
    """Append one action to the host's record (one ``write`` of one line under O_APPEND)."""
    line = json.dumps({"action": action, "device": device, "detail": detail, "pid": os.getpid()})
    path = root / ACTIONS_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    try:
        os.write(fd, (line + "\n").encode())
    finally:
        os.close(fd)


def actions(root: Path) -> list[dict[str, Any]]:
    """The hardware actions recorded on the host, oldest first (a torn last line is left out:
    its writer is still writing it)."""
    try:
        text = (root / ACTIONS_FILE).read_text()
    except FileNotFoundError:
        return []
    out: list[dict[str, Any]] = []
    for line in text.splitlines():
        try:
            out.append(json.loads(line))
        except ValueError:
            continue
    return out


def pr_seconds(root: Path) -> float:
    """The synthetic partial reconfiguration's duration (0 without the file or when invalid)."""
    try:
        return max(0.0, float((root / PR_SECONDS_FILE).read_text().strip()))
    except (OSError, ValueError):
        return 0.0


class SyntheticKernel:
    def __init__(self, root: Path | str, modules: tuple[str, ...] = ("vfio-pci",)) -> None:
        self.root = Path(root)
        self.writes: list[tuple[str, str]] = []
        self.fail_bind: set[str] = set()
        for module in modules:
            d = host_path(self.root, f"{PCI}/drivers/{module}")
            d.mkdir(parents=True, exist_ok=True)
            for name in ("bind", "unbind", "new_id", "remove_id", "uevent"):
                (d / name).touch()

    def _dev(self, bdf: str) -> Path:
        return host_path(self.root, f"{PCI}/devices/{bdf}")

    def write(self, path: str, value: str) -> None:
        target = host_path(self.root, path)
        if not target.exists():
            raise HostError("SysfsWriteFailed", f"writing to {path}: no such file")
        self.writes.append((path, value))
        parts = path.strip("/").split("/")
        if path.startswith(f"{PCI}/drivers/") and parts[-1] in ("bind", "unbind"):
            self._bind_unbind(parts[-2], parts[-1], value.strip())
            return
        if parts[-1] == "driver_override":
            text = value.strip()
            target.write_text((text or "(null)") + "\n")
            return
        if parts[-1] == "reset" and path.startswith(f"{PCI}/devices/"):
            record_action(self.root, "reset", parts[-2], value.strip())
            reset_gpu_at(self.root, parts[-2])  # a GPU's pending MIG mode takes effect
        if parts[-1] == "remove" and path.startswith(f"{PCI}/devices/"):
            record_action(self.root, "remove", parts[-2], value.strip())
        target.write_text(value)

    def _bind_unbind(self, driver: str, op: str, bdf: str) -> None:
        dev = self._dev(bdf)
        if not dev.exists():
            raise HostError("SysfsWriteFailed", f"{op} {bdf}: no such device")
        real = Path(os.path.realpath(dev))
        drv_dir = host_path(self.root, f"{PCI}/drivers/{driver}")
        link = real / "driver"
        if op == "unbind":
            current = os.path.basename(os.readlink(link)) if link.is_symlink() else None
            if current != driver:
                raise HostError("SysfsWriteFailed", f"unbind {bdf}: not bound to {driver}")
            link.unlink()
            (drv_dir / bdf).unlink(missing_ok=True)
            return
        if link.is_symlink():
            raise HostError("SysfsWriteFailed", f"bind {bdf}: device busy (already bound)")
        override = (real / "driver_override").read_text().strip()
        if (override not in ("", "(null)") and override != driver) or driver in self.fail_bind:
            raise HostError("SysfsWriteFailed", f"bind {bdf} to {driver}: No such device")
        link.symlink_to(os.path.relpath(drv_dir, real))
        (drv_dir / bdf).symlink_to(os.path.relpath(real, drv_dir))

    def fpga_program(self, port: FpgaPort, image: FpgaImage) -> None:
        if not host_path(self.root, port.fme_dev).exists():
            raise HostError("FMEOpenFailed", f"opening {port.fme_dev}: no such device")
        afu = host_path(self.root, port.port_sysfs) / "afu_id"
        if not afu.parent.exists():
            raise HostError("PartialReconfigurationFailed", f"{port.port_sysfs}: no such port")
        self.writes.append((port.fme_dev, f"PR port {port.port_id}: {image.name}"))
        record_action(self.root, "program", port.port_sysfs.rsplit("/", 1)[-1], image.afu_id)
        if delay := pr_seconds(self.root):
            time.sleep(delay)
        afu.write_text(image.afu_id + "\n")
