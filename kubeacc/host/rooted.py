"""What a host reached through one root directory has, whatever answers its NVML."""

from __future__ import annotations

from pathlib import Path

from kubeacc.host.files import HostRoot, WarningSink
from kubeacc.host.kernel import HostKernel, host_path
from kubeacc.host.tools import HostTools


class RootedHost:
    """Files, kernel and driver tools of the host under ``root``; subclasses add ``nvml()``."""

    def __init__(self, root: Path, kernel: HostKernel, tools: HostTools) -> None:
        self._root = root
        self._kernel = kernel
        self._tools = tools

    @property
    def root(self) -> Path:
        return self._root

    def files(self, sink: WarningSink | None = None, deadline: float | None = None) -> HostRoot:
        return HostRoot(self._root, sink, deadline)

    def path(self, path: str) -> Path:
        return host_path(self._root, path)

    @property
    def kernel(self) -> HostKernel:
        return self._kernel

    @property
    def tools(self) -> HostTools:
        return self._tools
