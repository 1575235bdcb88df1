"""The synthetic kernel's record of hardware actions (``/.synthetic/kernel-actions.jsonl``)."""

from __future__ import annotations

import os
from pathlib import Path

from kubeacc.host.kernel import FpgaImage, FpgaPort
from kubeacc.synthetic.kernel import ACTIONS_FILE, SyntheticKernel, actions
from kubeacc.synthetic.profiles import build
from tests.hosts import discover

AFU = "0123456789abcdef0123456789abcdef"


def test_every_reset_remove_and_reconfiguration_is_recorded_once_each(tmp_path: Path) -> None:
    root = build("intel-fpga-dfl", tmp_path / "root")
    kernel = SyntheticKernel(root)
    assert actions(root) == []
    kernel.write("/sys/bus/pci/devices/0000:3b:00.0/reset", "1")
    kernel.write("/sys/bus/pci/devices/0000:3b:00.0/reset", "1")
    kernel.write("/sys/bus/pci/devices/0000:3b:00.0/driver_override", "vfio-pci")  # no action
    kernel.write("/sys/bus/pci/devices/0000:3b:00.0/remove", "1")
    fpga = {d.name: d for d in discover(root).devices}["fpga-0000-3b-00-0"]
    port = FpgaPort.of(fpga)
    kernel.fpga_program(port, FpgaImage("a.gbs", "0" * 64, AFU, None, b"x"))
    # a second process (another agent) appends to the same record
    got = actions(root)
    assert [(a["action"], a["device"], a["detail"]) for a in got] == [
        ("reset", "0000:3b:00.0", "1"),
        ("reset", "0000:3b:00.0", "1"),
        ("remove", "0000:3b:00.0", "1"),
        ("program", port.port_sysfs.rsplit("/", 1)[-1], AFU),
    ]
    assert {a["pid"] for a in got} == {os.getpid()}
    # a line still being written (torn) is not read as an action
    with (root / ACTIONS_FILE).open("a") as f:
        f.write('{"action": "res')
    assert len(actions(root)) == 4
