"""``up --with-kubeacc`` refuses what cannot work before anything starts; the install's pieces.

The install itself runs in tests/charts/test_*_real_runtime.py (kubeacc.testbed.withkubeacc
under each) and, through ``python -m kubeacc.testbed up --with-kubeacc``, in
tests/docs/test_commands.py.
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest

from kubeacc.synthetic.bitstreams import BITSTREAMS
from kubeacc.testbed.__main__ import main
from kubeacc.testbed.withkubeacc import InstallError, synthetic_host, values_for


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--with-kubeacc", "--runtime", "fake"], "needs --runtime containerd"),
        (["--host", "dgx-h100"], "--host needs --with-kubeacc"),
        (["--with-kubeacc", "--host", "nope"], "unknown --host 'nope'; known: amd-gpu"),
        (["--with-kubeacc", "--multinode"], "takes one node"),
        (["--with-kubeacc", "--no-kubelet"], "takes one node"),
    ],
)
def test_up_refuses_before_starting(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    with pytest.raises(SystemExit) as exit_:
        main(["up", "--workdir", "/nonexistent/never-made", *argv])
    assert exit_.value.code == 2
    assert message in capsys.readouterr().err
    assert not Path("/nonexistent/never-made").exists()


@pytest.mark.skipif(os.geteuid() != 0, reason="mknod needs root")
def test_synthetic_host_has_real_device_nodes(tmp_path: Path) -> None:
    host = synthetic_host("dgx-h100", tmp_path / "host")
    gpus = sorted((host / "dev").glob("nvidia[0-9]*"))
    assert len(gpus) == 8
    assert all(stat.S_ISCHR(os.stat(g).st_mode) for g in gpus)
    assert os.stat(gpus[0]).st_rdev == os.stat("/dev/null").st_rdev
    assert (host / ".synthetic").is_dir()  # what the NVML stand-in reads


def test_unknown_profile_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InstallError, match="unknown host profile 'nope'"):
        synthetic_host("nope", tmp_path / "host")
    assert not (tmp_path / "host").exists()


def test_values_carry_the_host_nvml_and_bitstreams(tmp_path: Path) -> None:
    paths = {"kubelet_root": tmp_path / "kubelet", "cdi_dir": tmp_path / "cdi"}
    values = values_for(tmp_path / "host", tmp_path, **paths, nvml=True)
    assert values["agent"]["hostRoot"] == str(tmp_path / "host")
    (mount,) = values["agent"]["extraVolumeMounts"]
    assert mount["mountPath"] == "/host/.synthetic"
    assert values["nvidia"]["nvml"] == "auto"
    library = Path(values["bitstreams"]["hostPath"])
    assert sorted(str(p.relative_to(library)) for p in library.rglob("*.gbs")) == sorted(
        b.name for b in BITSTREAMS
    )
    off = values_for(tmp_path / "host", tmp_path, **paths, nvml=False)
    assert off["nvidia"]["nvml"] == "off" and "extraVolumes" not in off["agent"]
