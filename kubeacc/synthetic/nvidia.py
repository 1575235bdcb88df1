"""What the NVIDIA kernel driver exposes outside ``/sys``: ``/proc/driver/nvidia`` and ``/dev``.

The ``information`` file follows the driver's own layout (label, tabs, value), for example::

    Model: \t\t NVIDIA H100 80GB HBM3
    Bus Location: \t 0000:3d:00.0
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from kubeacc.synthetic.fsw import TreeWriter
from kubeacc.synthetic.pci import Bdf

PROC = "/proc/driver/nvidia"


@dataclass(frozen=True)
class NvidiaGpuProc:
    """The facts ``/proc/driver/nvidia/gpus/<bdf>/information`` reports for one GPU."""

    bdf: Bdf
    model: str
    uuid: str  # "GPU-..."
    minor: int
    irq: int = 0
    video_bios: str = "96.00.99.00.01"
    dma_bits: int = 52
    firmware: str | None = None
    excluded: bool = False

    def information(self) -> str:
        mask = (1 << self.dma_bits) - 1
        lines = [
            f"Model: \t\t {self.model}",
            f"IRQ:   \t\t {self.irq}",
            f"GPU UUID: \t {self.uuid}",
            f"Video BIOS: \t {self.video_bios}",
            "Bus Type: \t PCIe",
            f"DMA Size: \t {self.dma_bits} bits",
            f"DMA Mask: \t 0x{mask:x}",
            f"Bus Location: \t {self.bdf}",
            f"Device Minor: \t {self.minor}",
        ]
        if self.firmware:
            lines.append(f"GPU Firmware: \t {self.firmware}")
        lines.append(f"GPU Excluded:\t {'Yes' if self.excluded else 'No'}")
        return "\n".join(lines) + "\n"


def write_gpu(w: TreeWriter, gpu: NvidiaGpuProc) -> None:
    d = f"{PROC}/gpus/{gpu.bdf}"
    w.write(f"{d}/information", gpu.information())
    w.write(f"{d}/registry", 'Binary: ""\n')
    w.dev_node(f"/dev/nvidia{gpu.minor}")
    control_nodes(w)


def control_nodes(w: TreeWriter) -> None:
    """The per-host nodes every NVIDIA host has once the driver and UVM are loaded."""
    for name in ("nvidiactl", "nvidia-uvm", "nvidia-uvm-tools", "nvidia-modeset"):
        w.dev_node(f"/dev/{name}")


def write_version(
    w: TreeWriter,
    version: str,
    date: str = "Fri May 31 09:35:42 UTC 2024",
    gcc: str = "gcc version 12.3.0 (Ubuntu 12.3.0-1ubuntu1~22.04)",
) -> None:
    w.write(
        f"{PROC}/version",
        f"NVRM version: NVIDIA UNIX x86_64 Kernel Module  {version}  {date}\n"
        f"GCC version:  {gcc} \n",
    )
    w.write(f"{PROC}/params", "ResmanDebugLevel: 4294967295\nModifyDeviceFiles: 1\n")
    w.attr("/sys/module/nvidia/version", version)
    control_nodes(w)


def write_mig_caps(w: TreeWriter, minor: int, gpu_instances: Sequence[int]) -> None:
    """MIG capability files and nodes of existing GPU instances (by id, each with compute
    instance 0): ``/proc/driver/nvidia/capabilities/gpu<m>/mig/gi<id>[/ci0]/access``.

    Each ``access`` file names the minor of the ``/dev/nvidia-caps/nvidia-cap<N>`` node that
    grants it, numbered as the driver numbers them (:func:`kubeacc.synthetic.mig_hw.cap_minor`).
    """
    from kubeacc.synthetic.mig_hw import cap_minor

    base = f"{PROC}/capabilities"
    w.write(f"{base}/mig/config", "DeviceFileMinor: 1\nDeviceFileMode: 256\nDeviceFileModify: 1\n")
    w.write(f"{base}/mig/monitor", "DeviceFileMinor: 2\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    w.dev_node("/dev/nvidia-caps/nvidia-cap1")
    w.dev_node("/dev/nvidia-caps/nvidia-cap2")
    for gi in gpu_instances:
        for sub, cap in (("", cap_minor(minor, gi)), ("/ci0", cap_minor(minor, gi, 0))):
            w.write(
                f"{base}/gpu{minor}/mig/gi{gi}{sub}/access",
                f"DeviceFileMinor: {cap}\nDeviceFileMode: 292\nDeviceFileModify: 1\n",
            )
            w.dev_node(f"/dev/nvidia-caps/nvidia-cap{cap}")
