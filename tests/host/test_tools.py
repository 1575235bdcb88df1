"""The driver tools of the host: ``--driver-tools-dir`` is looked in first, the tools run with
links to the driver's own libraries (and no other library of that directory) on
LD_LIBRARY_PATH, and a pid file left by a daemon of an earlier container does not count for a
process that is not an MPS control daemon."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from kubeacc.agent.dra.sharing.mps import PID_FILE, MpsDaemons
from kubeacc.host.real import RealHost
from kubeacc.host.tools import HostTools, use_driver_tools
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.tools import PYTHON_ENV


def test_the_driver_tools_dir_comes_first_and_libraries_are_linked(tmp_path: Path) -> None:
    host = tmp_path / "host"
    (host / "usr/bin").mkdir(parents=True)
    (host / "usr/bin/nvidia-smi").write_text("#!/bin/sh\necho host-root\n")
    (host / "usr/bin/nvidia-smi").chmod(0o755)
    bin_dir, lib_dir = tmp_path / "driver/bin", tmp_path / "driver/lib"
    bin_dir.mkdir(parents=True)
    lib_dir.mkdir(parents=True)
    for name in ("libnvidia-ml.so.1", "libcuda.so.1", "libc.so.6", "libssl.so.3"):
        (lib_dir / name).write_text("")
    assert RealHost(host).tools.run("nvidia-smi", []) == "host-root\n"  # no tools dir yet

    tool = bin_dir / "nvidia-smi"
    tool.write_text('#!/bin/sh\necho "driver $LD_LIBRARY_PATH"\n')
    tool.chmod(0o755)
    links = tmp_path / "state/driver-libs"
    tools = RealHost(host, use_driver_tools(bin_dir, lib_dir, links)).tools
    assert tools.find("nvidia-smi") == tool
    assert tools.run("nvidia-smi", []) == f"driver {links}\n"
    assert tools.env()["PATH"].split(os.pathsep)[0] == str(bin_dir)
    assert sorted(p.name for p in links.iterdir()) == ["libcuda.so.1", "libnvidia-ml.so.1"]
    assert (links / "libcuda.so.1").resolve() == lib_dir / "libcuda.so.1"
    # a tool the tools dir lacks: the host root's, then PATH
    (host / "usr/bin/nvidia-cuda-mps-control").write_text("#!/bin/sh\n")
    (host / "usr/bin/nvidia-cuda-mps-control").chmod(0o755)
    found = tools.find("nvidia-cuda-mps-control")
    assert found == host / "usr/bin/nvidia-cuda-mps-control"


def test_a_missing_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match=r"driver tools directory .* is not a directory"):
        use_driver_tools(tmp_path / "nope", None, tmp_path / "links")
    assert not (tmp_path / "links").exists()  # nothing half-made


def test_a_synthetic_hosts_tools_run_with_this_interpreter(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv(PYTHON_ENV, raising=False)
    root = profiles.build("l4-pair", tmp_path / "host")
    assert SyntheticHost(root).tools.env()[PYTHON_ENV] == sys.executable
    assert PYTHON_ENV not in RealHost(root).tools.env()
    assert "Timeslice" in SyntheticHost(root).tools.run("nvidia-smi", ["compute-policy", "-l"])
    monkeypatch.setenv(PYTHON_ENV, "/usr/bin/python3")  # the agent's environment wins
    assert HostTools(root, defaults={PYTHON_ENV: "x"}).env()[PYTHON_ENV] == "/usr/bin/python3"


def test_a_stale_pid_file_naming_another_process_is_no_daemon(tmp_path: Path) -> None:
    host = profiles.build("l4-pair", tmp_path / "host")
    daemons = MpsDaemons(SyntheticHost(host), tmp_path / "state/mps")
    bus = "0000:01:00.0"
    daemons.pipe_dir(bus).mkdir(parents=True)
    # what a daemon of the agent's previous container left: its pid is now another process
    (daemons.pipe_dir(bus) / PID_FILE).write_text(f"{os.getpid()}\n")
    assert daemons.pid(bus) is None
    assert daemons.running() == {}
