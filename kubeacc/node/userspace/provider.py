"""The node's NVIDIA driver user space as CDI edits, for the DRA driver and the device plugin.

``--driver-user-space cdi`` (the default): kube-acc finds the user space under
``--driver-root`` and puts it into every CDI spec of an NVIDIA GPU. ``toolkit``: an installed
NVIDIA container toolkit does that, and kube-acc's specs carry none of it (never both: two
copies of the same libraries mounted over each other). The edits follow the loaded kernel
module: a driver upgrade is seen at the next prepare.
"""

from __future__ import annotations

import logging
import threading
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Any

from kubeacc.host import Host
from kubeacc.host.files import HostRoot
from kubeacc.node.userspace.edits import container_edits
from kubeacc.node.userspace.nvidia import DriverRootError, NvidiaUserSpace, find, module_version

log = logging.getLogger(__name__)


class UserSpaceMode(StrEnum):
    CDI = "cdi"
    TOOLKIT = "toolkit"


@dataclass
class DriverUserSpace:
    host: Host
    #: The driver root, a host path (read through the host: ``<host-root>/<driver-root>``).
    driver_root: str = "/"
    #: The kube-acc CDI hook's host path (None: not installed; the user space is refused).
    hook: Path | None = None
    #: The driver root as the container runtime sees it (default: the agent's own view).
    runtime_root: Path | None = None
    mode: UserSpaceMode = UserSpaceMode.CDI
    #: The host path of the ldconfig the hook runs (None: the host's own).
    ldconfig: Path | None = None
    _found: NvidiaUserSpace | None = field(default=None, init=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, init=False)

    @property
    def where(self) -> Path:
        return self.runtime_root or self.host.path(self.driver_root)

    def find(self) -> NvidiaUserSpace:
        """The user space of the loaded module (found again when the module changed)."""
        host = self.host.files()
        with self._lock:
            if self._found is not None and self._found.version == module_version(host):
                return self._found
            driver = HostRoot(self.host.path(self.driver_root), host.sink)
            self._found = find(host, driver, self.driver_root)
            return self._found

    def nvidia_edits(self) -> dict[str, Any]:
        """The ``containerEdits`` an NVIDIA GPU's container needs ({} in toolkit mode);
        DriverRootError with the reason otherwise."""
        if self.mode is UserSpaceMode.TOOLKIT:
            return {}
        if self.hook is None:
            raise DriverRootError("the kube-acc CDI hook (kubeacc-cdi-hook) is not installed")
        return container_edits(self.find(), self.where, self.hook, self.ldconfig)

    def check(self) -> None:
        """Log, once at start, what was found or why nothing was."""
        if self.mode is UserSpaceMode.TOOLKIT:
            log.info("NVIDIA driver user space: left to the NVIDIA container toolkit")
            return
        try:
            self.nvidia_edits()
        except DriverRootError as exc:
            log.error(
                "NVIDIA driver user space not found (--driver-root %s): %s; NVIDIA GPU "
                "claims fail to prepare until it is there",
                self.driver_root,
                exc,
            )
            return
        us = self._found
        assert us is not None
        log.info(
            "NVIDIA driver user space %s from %s: %d libraries in %s, %d utilities%s%s",
            us.version,
            self.where,
            len(us.libraries),
            us.library_dir,
            len(us.utilities),
            ", firmware" if us.firmware else "",
            f"; absent: {', '.join(us.absent)}" if us.absent else "",
        )
