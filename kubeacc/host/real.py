"""The real node: its files under ``--host-root``, the machine's NVML, the Linux kernel.

NVML describes the machine it runs on, whatever the file root: a node agent in a container reads
the host's sysfs under ``--host-root=/host`` and the host's GPUs through the driver's
``libnvidia-ml.so.1`` mounted into the container (``--nvml-library``).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml

from kubeacc.host.interface import NvmlUnavailable
from kubeacc.host.kernel import LinuxKernel
from kubeacc.host.rooted import RootedHost
from kubeacc.host.tools import DriverTools, HostTools


class RealHost(RootedHost):
    """A node reached through the machine's own interfaces, its files under ``root``."""

    def __init__(self, root: Path | str = "/", driver: DriverTools | None = None) -> None:
        path = Path(root)
        super().__init__(path, LinuxKernel(path), HostTools(path, driver or DriverTools()))

    def nvml(self) -> Any:
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as err:
            raise NvmlUnavailable("libnvidia-ml.so.1", f"NVML unavailable: {err}") from None
        return pynvml
