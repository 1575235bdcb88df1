"""NVML through the host seam: ``select_nvml`` warns when it should, for either host."""

from __future__ import annotations

import shutil
from pathlib import Path

import pynvml
import pytest

from kubeacc.host import NvmlUnavailable, select_nvml
from kubeacc.host.files import WarningSink
from kubeacc.host.real import RealHost
from kubeacc.synthetic.host import NVML_DESCRIPTION, SyntheticHost
from kubeacc.synthetic.nvml_control import ControlledNVML
from tests.hosts import HostFactory


def test_a_synthetic_host_answers_with_its_description(hosts: HostFactory) -> None:
    host = SyntheticHost(hosts.pristine("l4-pair"))
    assert isinstance(host.nvml(), ControlledNVML)
    assert host.path(NVML_DESCRIPTION).is_file()
    sink = WarningSink()
    assert select_nvml(host, sink, "off") is None
    assert select_nvml(host, sink, "on") is not None and not sink.items


def test_no_description_is_no_nvml_and_nothing_to_warn_about(hosts: HostFactory) -> None:
    host = SyntheticHost(hosts.pristine("intel-fpga-dfl"))
    with pytest.raises(NvmlUnavailable) as err:
        host.nvml()
    assert err.value.absent
    sink = WarningSink()
    assert select_nvml(host, sink, "on") is None
    assert sink.items == []


def test_a_broken_description_is_a_warning_whatever_the_mode(hosts: HostFactory) -> None:
    root = hosts.copy("l4-pair")
    (root / NVML_DESCRIPTION.lstrip("/")).write_text("[1, 2]")
    sink = WarningSink()
    assert select_nvml(SyntheticHost(root), sink, "auto") is None
    (warning,) = sink.items
    assert warning.path == NVML_DESCRIPTION
    assert "NVML description unusable" in warning.message


def test_the_real_hosts_nvml_is_the_machines(
    hosts: HostFactory, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    root = tmp_path / "host"
    shutil.copytree(hosts.pristine("l4-pair"), root, symlinks=True)
    calls: list[str] = []
    monkeypatch.setattr(pynvml, "nvmlInit", lambda: calls.append("init"))
    assert RealHost(root).nvml() is pynvml  # the tree's description is not the machine
    assert calls == ["init"]
