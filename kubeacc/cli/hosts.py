"""The node a command works on, chosen once from its command line (``--host-root``, ``--host``).

This is the one place that decides whether a host root is a real node or a synthetic tree
(:mod:`kubeacc.synthetic`); everything below gets a :class:`~kubeacc.host.Host` and asks it.
"""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

from kubeacc.cli.declare import option
from kubeacc.cli.errors import fail
from kubeacc.host import Host
from kubeacc.host.tools import DriverTools


class HostKind(StrEnum):
    #: Synthetic when the tree is one (it has ``/.synthetic``), real otherwise.
    AUTO = "auto"
    #: The node's own files, the machine's NVML, the Linux kernel, the driver's tools.
    REAL = "real"
    #: A tree built by ``python -m kubeacc.synthetic``: its NVML description, its tools.
    SYNTHETIC = "synthetic"


HostKindOption = Annotated[
    HostKind,
    option(
        "--host",
        help="What --host-root is: real (a node's /sys, /dev and /proc), synthetic (a host tree "
        "built by kubeacc.synthetic) or auto (synthetic when the tree is one).",
    ),
]
SimulateKernelOption = Annotated[
    bool,
    option(
        help="Synthetic host: emulate the kernel's sysfs/ioctl effects (FPGA programming, "
        "driver binding, resets)."
    ),
]


def check_host_root(root: Path) -> None:
    """One clear error (exit 2) for a host root that is not a directory."""
    if not root.is_dir():
        fail(f"host root {root} is not a directory")


def open_host(
    root: Path,
    kind: HostKind = HostKind.AUTO,
    *,
    simulate_kernel: bool = False,
    driver: DriverTools | None = None,
) -> Host:
    """The host under ``root``: real or synthetic, as ``kind`` says (module docstring)."""
    check_host_root(root)
    if kind is HostKind.AUTO:
        from kubeacc.synthetic.marker import is_synthetic

        kind = HostKind.SYNTHETIC if is_synthetic(root) else HostKind.REAL
    if kind is HostKind.SYNTHETIC:
        from kubeacc.synthetic.host import SyntheticHost
        from kubeacc.synthetic.kernel import SyntheticKernel

        kernel = SyntheticKernel(root) if simulate_kernel else None
        return SyntheticHost(root, kernel=kernel, driver=driver)
    if simulate_kernel:
        fail("--simulate-kernel emulates the kernel of a synthetic host; this one is real")
    from kubeacc.host.real import RealHost

    return RealHost(root, driver)
