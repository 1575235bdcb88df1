"""What kube-acc asks of a node, in one place (docs/architecture.md, "The host seam").

Discovery, the DRA driver (MIG partitions, GPU sharing, FPGA programming for claims) and the
life-cycle agent reach the node only through a :class:`Host`:

* ``files()``: a read-only view of the node's ``/sys``, ``/proc`` and ``/dev`` under its root
  (:class:`~kubeacc.host.files.HostRoot`), and ``path()`` for a host path as a machine path;
* ``nvml()``: the NVIDIA Management Library describing the node's GPUs (pynvml's module API);
* ``kernel``: the kernel operations that change the node (sysfs attribute writes, the FPGA
  partial-reconfiguration ioctl; :class:`~kubeacc.host.kernel.HostKernel`);
* ``tools``: the driver's command-line tools (``nvidia-smi``, ``nvidia-cuda-mps-control``).

A host is chosen once, by the command that starts a component (``kubeacc agent``,
``device-plugin``, ``lifecycle-agent``, ``discover``, ``demo``), and handed down. The real node
is :class:`kubeacc.host.real.RealHost`; a synthetic host tree answers through its own
implementation, ``SyntheticHost``, the worked example of docs/architecture.md.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from kubeacc.host.files import HostRoot, WarningSink
from kubeacc.host.kernel import HostKernel
from kubeacc.host.tools import HostTools


class NvmlUnavailable(Exception):
    """The host's NVML cannot be used.

    ``where`` is what a discovery warning names. ``absent``: the host has no NVML by
    construction (nothing to warn about, whatever was asked); ``broken``: the host says it has
    NVML but what it has is unusable (worth a warning even when NVML was not asked for)."""

    def __init__(
        self, where: str, message: str, *, absent: bool = False, broken: bool = False
    ) -> None:
        super().__init__(message)
        self.where = where
        self.message = message
        self.absent = absent
        self.broken = broken


class Host(Protocol):
    """One node, as kube-acc reads and changes it."""

    @property
    def root(self) -> Path:
        """Where the node's ``/sys``, ``/proc`` and ``/dev`` are seen (``/`` on a node)."""
        ...

    def files(self, sink: WarningSink | None = None, deadline: float | None = None) -> HostRoot:
        """A read view of the node's files; what cannot be read goes to ``sink``."""
        ...

    def path(self, path: str) -> Path:
        """The machine path of the host path ``path`` (``/proc/driver/...``)."""
        ...

    def nvml(self) -> Any:
        """The node's NVML, initialised (pynvml's functions by name); NvmlUnavailable."""
        ...

    @property
    def kernel(self) -> HostKernel:
        """Sysfs writes and the FPGA partial-reconfiguration ioctl."""
        ...

    @property
    def tools(self) -> HostTools:
        """The driver's command-line tools."""
        ...


def select_nvml(host: Host, sink: WarningSink, mode: str = "auto") -> Any | None:
    """The host's NVML for ``mode`` (``auto``, ``on``: warn when unusable, ``off``), or None.

    A host without NVML by construction is quiet; an unusable NVML is a warning in ``sink`` when
    ``mode`` is ``on``, or always when the host claims an NVML it cannot give."""
    if mode == "off":
        return None
    try:
        return host.nvml()
    except NvmlUnavailable as err:
        if err.broken or (mode == "on" and not err.absent):
            sink.add(err.where, err.message)
        return None
