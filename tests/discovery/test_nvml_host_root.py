"""NVML under a host root: the machine's NVML describes the GPUs whatever ``--host-root`` is.

The host tree here is a synthetic one without its ``/.synthetic`` marker, read as a real host
(:class:`~kubeacc.host.real.RealHost`): what a node agent in a container sees under ``/host``.
The machine's NVML is replaced at the call boundary (the ``pynvml`` functions) by the synthetic
NVML answering from the same server's description.
"""

from __future__ import annotations

import shutil
from pathlib import Path

import pynvml
import pytest

from kubeacc.discovery.nvml import use_nvml_library
from kubeacc.host.real import RealHost
from kubeacc.model import DeviceType
from kubeacc.synthetic.nvmllib import SyntheticNVML
from tests.hosts import HostFactory, discover


def _as_real_host(hosts: HostFactory, tmp_path: Path) -> tuple[Path, Path]:
    """A dgx-h100 tree without the synthetic marker, and its NVML description moved aside."""
    root = hosts.copy("dgx-h100")
    shutil.move(root / ".synthetic", tmp_path / "machine")
    return root, tmp_path / "machine" / "nvml.json"


def _machine_nvml(monkeypatch: pytest.MonkeyPatch, nvml: object) -> None:
    for name in dir(nvml):
        if name.startswith("nvml"):
            monkeypatch.setattr(pynvml, name, getattr(nvml, name))


def test_machine_nvml_describes_gpus_under_a_host_root(
    hosts: HostFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, description = _as_real_host(hosts, tmp_path)
    assert str(root) != "/"
    _machine_nvml(monkeypatch, SyntheticNVML.from_file(str(description)))
    gpus = discover(RealHost(root)).by_type(DeviceType.GPU)
    assert len(gpus) == 8
    assert {g.source for g in gpus} == {"nvml"}
    assert all(g.uuid and g.uuid.startswith("GPU-") for g in gpus)
    assert all(g.links for g in gpus)  # NVLink peers come only from NVML
    assert {g.source for g in discover(RealHost(root), nvml="off").by_type(DeviceType.GPU)} == {
        "nvidia-sysfs"
    }


def test_without_nvml_auto_is_quiet_and_on_warns(
    hosts: HostFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root, _ = _as_real_host(hosts, tmp_path)

    def missing() -> None:
        raise pynvml.NVMLError(pynvml.NVML_ERROR_LIBRARY_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlInit", missing)
    auto = discover(RealHost(root))
    assert {g.source for g in auto.by_type(DeviceType.GPU)} == {"nvidia-sysfs"}
    assert not [w for w in auto.warnings if w.path == "libnvidia-ml.so.1"]
    on = discover(RealHost(root), nvml="on")
    (warning,) = [w for w in on.warnings if w.path == "libnvidia-ml.so.1"]
    assert "NVML unavailable" in warning.message


def test_a_synthetic_host_never_asks_the_machine(
    hosts: HostFactory, monkeypatch: pytest.MonkeyPatch
) -> None:
    def forbidden() -> None:
        raise AssertionError("the machine's NVML was asked about a synthetic host")

    monkeypatch.setattr(pynvml, "nvmlInit", forbidden)
    assert discover(hosts.pristine("intel-fpga-dfl"), nvml="on").by_type(DeviceType.FPGA)


def test_nvml_library_file_is_the_one_loaded(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pynvml, "nvmlLib", None)
    assert not use_nvml_library(tmp_path / "libnvidia-ml.so.1")  # no driver on this node
    assert pynvml.nvmlLib is None
    dirs = ("/lib/x86_64-linux-gnu", "/usr/lib/x86_64-linux-gnu", "/lib64", "/usr/lib64")
    libc = next(p for d in dirs if (p := Path(d) / "libc.so.6").is_file())
    # Any shared object shows which file NVML calls go to: libc has no nvmlInit_v2.
    assert use_nvml_library(libc)
    with pytest.raises(pynvml.NVMLError) as err:
        pynvml.nvmlInit()
    assert err.value.value == pynvml.NVML_ERROR_FUNCTION_NOT_FOUND
