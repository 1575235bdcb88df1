"""User mistakes end in one line on stderr, never a traceback: exit 2 for usage, 1 at run time.

Each case runs the installed ``kubeacc`` script in a clean environment (no ``$KUBECONFIG``,
an empty ``$HOME``)."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import yaml

from tests.cli.clirun import assert_one_line_error, kubeacc


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def kubeconfig_doc(server: str, cluster: str = "c", **user: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": cluster, "cluster": {"server": server}}],
        "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
        "users": [{"name": "u", "user": user or {"token": "abc"}}],
        "current-context": "c",
    }


def _write(path: Path, text: str) -> str:
    path.write_text(text)
    return str(path)


def test_kubeconfig_flag_to_a_missing_file_is_a_usage_error(tmp_path: Path) -> None:
    result = kubeacc("plan", "--kubeconfig", str(tmp_path / "nope"), home=tmp_path)
    assert_one_line_error(result, 2, "--kubeconfig", "does not exist", "kubeacc plan --help")


def test_kubeconfig_env_to_a_missing_file(tmp_path: Path) -> None:
    result = kubeacc("plan", home=tmp_path, KUBECONFIG=str(tmp_path / "nope"))
    assert_one_line_error(result, 1, "$KUBECONFIG", "no such file")


def test_no_configuration_at_all_says_how_to_give_one(tmp_path: Path) -> None:
    result = kubeacc("install-classes", home=tmp_path)
    assert_one_line_error(result, 1, "no cluster configured", "--kubeconfig", "$KUBECONFIG")


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("clusters: [\n", "not valid YAML (line 2)"),
        ("- just\n- a list\n", "not a kubeconfig"),
        ("clusters: []\ncontexts: []\n", "no clusters or no contexts"),
        (yaml.safe_dump(kubeconfig_doc("https://127.0.0.1:1", cluster="other")), "'c'"),
        ("clusters: 5\ncontexts: []\n", "clusters must be a list"),
    ],
)
def test_malformed_kubeconfig(tmp_path: Path, text: str, needle: str) -> None:
    path = _write(tmp_path / "kc", text)
    for args, env in ((["--kubeconfig", path], {}), ([], {"KUBECONFIG": path})):
        result = kubeacc("plan", *args, home=tmp_path, **env)
        assert_one_line_error(result, 1, needle)


def test_unreachable_server(tmp_path: Path) -> None:
    server = f"https://127.0.0.1:{_free_port()}"
    path = _write(tmp_path / "kc", yaml.safe_dump(kubeconfig_doc(server)))
    result = kubeacc("plan", "--kubeconfig", path, home=tmp_path)
    assert_one_line_error(result, 1, "cannot reach the API server", server)
    # A long-running command that needs the server at start fails the same way.
    result = kubeacc("controller", "--install-crds", home=tmp_path, KUBECONFIG=path)
    assert_one_line_error(result, 1, "cannot reach the API server", server)


def test_missing_client_certificate_file(tmp_path: Path) -> None:
    doc = kubeconfig_doc(
        "https://127.0.0.1:1", **{"client-certificate": "nope.crt", "client-key": "nope.key"}
    )
    path = _write(tmp_path / "kc", yaml.safe_dump(doc))
    result = kubeacc("plan", "--kubeconfig", path, home=tmp_path)
    assert_one_line_error(result, 1, str(tmp_path / "kc"))


@pytest.mark.parametrize(
    "args",
    [
        ["discover", "--host-root", "/nonexistent-root"],
        ["agent", "--node-name", "n", "--host-root", "/nonexistent-root"],
        ["lifecycle-agent", "--node-name", "n", "--host-root", "/nonexistent-root"],
        ["device-plugin", "--host-root", "/nonexistent-root"],
    ],
)
def test_host_root_that_does_not_exist(tmp_path: Path, args: list[str]) -> None:
    result = kubeacc(*args, home=tmp_path)
    assert_one_line_error(result, 2, "host root /nonexistent-root is not a directory")


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["discover", "-o", "xml"], "'--output'"),
        (["plan", "-o", "wyde"], "'--output'"),
        (["discover", "--nvml", "sometimes"], "--nvml"),
        (["controller", "--log-level", "loud"], "'--log-level'"),
        (["device-plugin", "--interval", "0"], "'--interval'"),
        (["discover", "--no-such-flag"], "--no-such-flag"),
        (["agent", "--no-such-flag"], "--no-such-flag"),
        (["no-such-command"], "no-such-command"),
    ],
)
def test_bad_flags_are_usage_errors(tmp_path: Path, args: list[str], needle: str) -> None:
    result = kubeacc(*args, home=tmp_path)
    assert_one_line_error(result, 2, needle)


def test_plan_folder_and_kubeconfig_together(tmp_path: Path) -> None:
    path = _write(tmp_path / "kc", yaml.safe_dump(kubeconfig_doc("https://127.0.0.1:1")))
    result = kubeacc("plan", str(tmp_path), "--kubeconfig", path, home=tmp_path)
    assert_one_line_error(result, 2, "not both")


def test_no_arguments_prints_help(tmp_path: Path) -> None:
    result = kubeacc(home=tmp_path)
    assert result.returncode == 0
    assert "discover" in result.stdout and "controller" in result.stdout
