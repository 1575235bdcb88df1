"""A Cyborg agent with Cyborg's own Intel FPGA driver, on a synthetic PAC card.

Cyborg's ``intel_fpga_driver`` finds cards under ``/sys/class/fpga`` and ``/sys/bus/pci/devices``
(OPAE's ``intel-fpga-pci`` layout; a PF counts only with an SR-IOV capability) and programs one
by running ``/usr/bin/fpgaconf --bus .. --device .. --function .. FILE`` through its privsep
daemon. :class:`FpgaHost` gives it a machine of that shape without touching this one: the agent
runs in a mount namespace of its own (``unshare --mount``, private propagation) where

- ``/sys`` is the ``sys`` of a synthetic host tree (:func:`kubeacc.synthetic.hosts_fpga.
  intel_pac_opae`: one PAC Arria 10, its region empty), so discovery and the AFU Cyborg reports
  are the tree's;
- ``/usr/bin`` is an overlay of the machine's with one file added: ``fpgaconf``, which runs
  :mod:`kubeacc.synthetic.tools.fpgaconf` (the card's ``afu_id`` becomes the GBS header's AFU;
  a bitstream for another FIM is refused, as the real tool refuses it).

The privsep daemon is started by the agent (it runs as root here) with the venv's
``privsep-helper`` (``[cyborg_sys_admin] helper_command``), so it is in the same namespace.
"""

from __future__ import annotations

import json
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeacc.synthetic.hosts_fpga import intel_pac_opae
from kubeacc.synthetic.tree import HostBuilder

#: The stand-in tool, a standard-library script.
FPGACONF = Path(__file__).resolve().parents[1] / "synthetic/tools/fpgaconf.py"
_RECORD = ".synthetic/fpgaconf.jsonl"


@dataclass(frozen=True)
class FpgaHost:
    """One synthetic PAC host of compute host ``name`` under ``workdir``."""

    name: str
    workdir: Path
    bdf: str

    @property
    def root(self) -> Path:
        return self.workdir / "host"

    def afu_id(self) -> str:
        """The AFU the card's port reports now."""
        dev = self.root / "sys/bus/pci/devices" / self.bdf
        (port,) = dev.glob("fpga/intel-fpga-dev.*/intel-fpga-port.*")
        return (port / "afu_id").read_text().strip()

    def interface_id(self) -> str:
        dev = self.root / "sys/bus/pci/devices" / self.bdf
        (fme,) = dev.glob("fpga/intel-fpga-dev.*/intel-fpga-fme.*")
        return (fme / "pr/interface_id").read_text().strip()

    def fpgaconf_runs(self) -> list[dict[str, Any]]:
        """Every run of ``fpgaconf`` on this host, oldest first."""
        path = self.root / _RECORD
        if not path.is_file():
            return []
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]

    def wrap(self, argv: list[str]) -> list[str]:
        """``argv`` run in the host's own mount namespace (module doc)."""
        upper, work = self.workdir / "usr-bin", self.workdir / "usr-bin.work"
        script = (
            "set -e\n"
            f'mount --bind "{self.root / "sys"}" /sys\n'
            f'mount -t overlay overlay -o "lowerdir=/usr/bin,upperdir={upper},workdir={work}" '
            "/usr/bin\n"
            'exec "$@"\n'
        )
        return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script, "sh", *argv]


def make_fpga_host(name: str, workdir: Path) -> FpgaHost:
    """Write the synthetic host and the ``fpgaconf`` that programs it."""
    workdir.mkdir(parents=True, exist_ok=True)
    bdf = intel_pac_opae(HostBuilder(workdir / "host", seed=name), name)
    host = FpgaHost(name, workdir, bdf)
    (host.root / _RECORD).parent.mkdir(parents=True, exist_ok=True)
    for sub in ("usr-bin", "usr-bin.work"):
        (workdir / sub).mkdir(exist_ok=True)
    tool = workdir / "usr-bin/fpgaconf"
    tool.write_text(
        "#!/bin/sh\n"
        f'export KUBEACC_FPGACONF_RECORD="{host.root / _RECORD}"\n'
        f'exec "{sys.executable}" -I -S "{FPGACONF}" "$@"\n'
    )
    tool.chmod(0o755)
    return host
