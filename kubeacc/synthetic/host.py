"""A synthetic host tree as a :class:`~kubeacc.host.Host`: the worked example of the seam.

Files are the tree's own; NVML is the tree's description (``/.synthetic/nvml.json``, answered by
:class:`~kubeacc.synthetic.nvml_control.ControlledNVML`), or none when the tree has no
description; the driver tools are the tree's launchers (``/usr/bin/nvidia-smi``, ...), run with
the agent's own interpreter; the kernel is the one given (a
:class:`~kubeacc.synthetic.kernel.SyntheticKernel`: writes have the kernel's side effects in the
tree), else plain file writes into the tree.
"""

from __future__ import annotations

import sys
from pathlib import Path

from kubeacc.host.interface import NvmlUnavailable
from kubeacc.host.kernel import HostKernel, LinuxKernel
from kubeacc.host.rooted import RootedHost
from kubeacc.host.tools import DriverTools, HostTools
from kubeacc.synthetic.nvml_control import ControlledNVML
from kubeacc.synthetic.tools import PYTHON_ENV

#: Where a synthetic host describes the NVML answers of its GPUs (kubeacc.synthetic.nvml).
NVML_DESCRIPTION = "/.synthetic/nvml.json"


class SyntheticHost(RootedHost):
    """The host of a synthetic tree (module docstring)."""

    def __init__(
        self,
        root: Path | str,
        *,
        kernel: HostKernel | None = None,
        driver: DriverTools | None = None,
    ) -> None:
        path = Path(root)
        super().__init__(
            path,
            kernel if kernel is not None else LinuxKernel(path),
            HostTools(path, driver or DriverTools(), {PYTHON_ENV: sys.executable}),
        )

    def nvml(self) -> ControlledNVML:
        description = self.path(NVML_DESCRIPTION)
        if not description.exists():
            raise NvmlUnavailable(NVML_DESCRIPTION, "no NVML on this host", absent=True)
        try:
            return ControlledNVML.from_file(str(description))
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise NvmlUnavailable(
                NVML_DESCRIPTION, f"NVML description unusable: {err}", broken=True
            ) from None
