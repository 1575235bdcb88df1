"""An agent whose state and CDI directories live on the lazy file system
(kubeacc/testbed/lazyfs.py), so that a kill can be a power cut: the process SIGKILLed and, at the
same instant, every write it never made durable dropped."""

from __future__ import annotations

import shutil
from pathlib import Path

from kubeacc.testbed.lazyfs import LazyMount

from .agentproc import AgentProcess


class LazyState:
    """The lazy mounts of one agent's directories; each keeps its disk in ``<dir>.disk``."""

    def __init__(self, agent: AgentProcess, *, lazy_cdi: bool = True) -> None:
        """``lazy_cdi``: False leaves the CDI directory a plain one (a container runtime in
        another mount namespace reads it; a reboot empties it, so its durability is moot)."""
        self.agent = agent
        self.state = _mount_of(agent.state_dir)
        self.cdi = _mount_of(agent.cdi_dir) if lazy_cdi else None
        #: power cuts made
        self.cuts = 0

    def mount(self) -> None:
        for m in self._mounts():
            if not m.mounted():
                m.mount()

    def _mounts(self) -> list[LazyMount]:
        return [self.state] if self.cdi is None else [self.state, self.cdi]

    def power_cut(self, *, cdi_kept: bool = True) -> None:
        """SIGKILL the agent and, at once, drop what neither directory made durable; both left
        unmounted. ``cdi_kept``: False for a CDI directory in ``/var/run``, a tmpfs a reboot
        empties."""
        if self.agent.proc is not None and self.agent.proc.poll() is None:
            AgentProcess.kill(self.agent)  # the SIGKILL itself (PowerCutAgent.kill cuts)
        for m in self._mounts():
            m.power_cut()
        self.cuts += 1
        if not cdi_kept:
            self.empty_cdi()

    def empty_cdi(self) -> None:
        """The CDI directory as after a boot (a tmpfs)."""
        where = self.agent.cdi_dir if self.cdi is None else self.cdi.backing
        shutil.rmtree(where, ignore_errors=True)
        where.mkdir()

    def unmount(self) -> None:
        """A clean shutdown: every write kept."""
        for m in self._mounts():
            m.unmount()


def _mount_of(directory: Path) -> LazyMount:
    return LazyMount(directory.with_name(directory.name + ".disk"), directory)


class PowerCutAgent(AgentProcess):
    """An agent on lazy mounts: :meth:`kill` is a power cut and the boot after it (the mounts
    back, the agent not started); :meth:`stop` a clean shutdown."""

    def __init__(
        self, node: str, host_root: Path, kubeconfig: Path, kubelet_root: Path, workdir: Path
    ) -> None:
        super().__init__(node, host_root, kubeconfig, kubelet_root, workdir)
        self.lazy = LazyState(self)
        self.lazy.mount()

    def kill(self) -> None:
        self.lazy.power_cut()
        self.lazy.mount()

    def stop(self) -> None:
        super().stop()
        self.lazy.unmount()
