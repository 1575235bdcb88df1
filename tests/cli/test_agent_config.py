"""``kubeacc agent`` config files: the device-plugin config decides which types leave DRA, bad
files stop the agent with one line before it touches anything."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from kubeacc.cli.agent import _device_plugin_config
from kubeacc.deviceplugin.config import Strategy
from kubeacc.model import DeviceType


def test_config_types_plus_flag_types(tmp_path: Path) -> None:
    f = tmp_path / "dp.yaml"
    f.write_text("kind: DevicePluginConfig\ntypes:\n  fpga: {replicas: 4, strategy: packed}\n")
    cfg = _device_plugin_config([DeviceType.GPU], f)
    assert cfg is not None
    assert set(cfg.types) == {DeviceType.FPGA, DeviceType.GPU}
    assert cfg.types[DeviceType.FPGA].strategy is Strategy.PACKED
    assert cfg.types[DeviceType.GPU].replicas == 1
    assert _device_plugin_config([], None) is None


@pytest.mark.parametrize(
    ("flag", "text", "message"),
    [
        ("--device-plugin-config", "types: {tpu: {}}", "types.tpu"),
        ("--discovery-config", "devices: [{vendor: xyz, type: gpu}]", "devices.0.vendor"),
        ("--metrics-address", None, "is not HOST:PORT or :PORT"),
        ("--driver-tools-dir", None, "driver tools directory /nonexistent/bin is not a directory"),
        ("--driver-library-dir", None, "driver library directory /nonexistent/bin is not a"),
    ],
)
def test_bad_input_is_one_line(tmp_path: Path, flag: str, text: str | None, message: str) -> None:
    arg = "/nonexistent/bin" if flag.startswith("--driver-") else "9400"
    if text is not None:
        (tmp_path / "c.yaml").write_text(text)
        arg = str(tmp_path / "c.yaml")
    (line,) = _refused(tmp_path, f"{flag}={arg}")
    assert line.startswith("error: ") and message in line


def _refused(tmp_path: Path, *flags: str) -> list[str]:
    """stderr of ``kubeacc agent`` with ``flags``: it must exit 2 having made no state."""
    done = subprocess.run(
        [
            str(Path(sys.executable).parent / "kubeacc"),
            "agent",
            "--node-name=n",
            *flags,
            f"--state-dir={tmp_path / 'state'}",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2
    assert not (tmp_path / "state").exists()
    return done.stderr.splitlines()


def test_a_bad_memory_shared_selector_is_one_line(tmp_path: Path) -> None:
    assert _refused(tmp_path, "--memory-shared=all", "--memory-shared=vendor=nvidia") == [
        "error: memory-shared selector 'vendor=nvidia': expected all, type=TYPE, model=GLOB, "
        "pci=BUS-ID or name=DEVICE"
    ]


def test_a_wrong_dra_publish_kind_is_one_line(tmp_path: Path) -> None:
    assert _refused(tmp_path, "--dra-publish=gpu", "--dra-publish=vf") == [
        "error: --dra-publish vf needs --dra-publish nic: VFs go with their NICs"
    ]


def test_cyborg_flags_go_together(tmp_path: Path) -> None:
    (line,) = _refused(tmp_path, "--inventory=cyborg")
    assert line == "error: --inventory cyborg needs --cyborg-credentials"
    (line,) = _refused(tmp_path, f"--cyborg-credentials={tmp_path / 'c.yaml'}")
    assert "need --inventory cyborg" in line
    (line,) = _refused(tmp_path, "--cyborg-compute-host=h1")
    assert "need --inventory cyborg" in line


def _agent_on_cyborg(tmp_path: Path, creds: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "c.yaml").write_text(creds)
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        "apiVersion: v1\nkind: Config\ncurrent-context: c\n"
        "clusters: [{name: c, cluster: {server: 'http://127.0.0.1:9'}}]\n"
        "contexts: [{name: c, context: {cluster: c, user: u}}]\nusers: [{name: u, user: {}}]\n"
    )
    return subprocess.run(
        [
            str(Path(sys.executable).parent / "kubeacc"),
            "agent",
            "--node-name=n",
            "--inventory=cyborg",
            f"--cyborg-credentials={tmp_path / 'c.yaml'}",
            f"--kubeconfig={kubeconfig}",
            f"--host-root={tmp_path}",
            f"--state-dir={tmp_path / 'state'}",
            f"--cdi-dir={tmp_path / 'cdi'}",
            f"--kubelet-root={tmp_path / 'kubelet'}",
            "--driver-user-space=toolkit",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_a_bad_cyborg_credentials_file_is_one_line(tmp_path: Path) -> None:
    done = _agent_on_cyborg(tmp_path, "placementUrl: http://127.0.0.1:9\n")
    assert done.returncode == 1
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert "Cyborg credentials" in line and "cyborgUrl" in line


def test_a_cyborg_that_does_not_answer_at_start_is_named(tmp_path: Path) -> None:
    done = _agent_on_cyborg(
        tmp_path, "cyborgUrl: http://127.0.0.1:9\nplacementUrl: http://127.0.0.1:9\n"
    )
    assert done.returncode == 1
    (line,) = [ln for ln in done.stderr.splitlines() if ln.startswith("error: ")]
    assert line.startswith("error: Cyborg's devices of this node not read at start: ")
    assert "not reached" in line
