"""The conventions admins type without thinking, through the real ``kubeacc`` script:
``--version``, shell completion, ``-n``/``-A``/``--context``/``--kubeconfig`` on every command
that talks to a cluster, and ``-o wide``."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

import kubeacc as package
from tests.cli.clirun import assert_one_line_error, clean_env, kubeacc
from tests.cli.test_errors_cli import kubeconfig_doc
from tests.cli.test_tables_cli import ANSI
from tests.hosts import HostFactory

#: Every command that talks to the API server.
CLUSTER_COMMANDS = (
    "plan",
    "status",
    "install-classes",
    "cleanup",
    "agent",
    "controller",
    "extender",
    "lifecycle-agent",
)


def test_version_flag(tmp_path: Path) -> None:
    result = kubeacc("--version", home=tmp_path)
    assert (result.returncode, result.stdout) == (0, f"{package.__version__}\n")


def _complete(words: str, tmp_path: Path) -> list[str]:
    import subprocess

    from tests.cli.clirun import KUBEACC

    env = clean_env(
        tmp_path,
        _KUBEACC_COMPLETE="complete_bash",
        COMP_WORDS=words,
        COMP_CWORD=str(len(words.split()) - (0 if words.endswith(" ") else 1)),
    )
    done = subprocess.run([KUBEACC], env=env, capture_output=True, text=True, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.split()


def test_shell_completion(tmp_path: Path) -> None:
    # named, the shell needs no detection (the test's parent is no shell)
    script = kubeacc("completion", "bash", home=tmp_path)
    assert script.returncode == 0, script.stderr
    assert "_KUBEACC_COMPLETE=complete_bash" in script.stdout
    assert kubeacc("completion", "zsh", home=tmp_path).stdout.startswith("#compdef kubeacc")
    assert kubeacc("completion", "tcsh", home=tmp_path).returncode == 2
    assert _complete("kubeacc sta", tmp_path) == ["status"]
    flags = _complete("kubeacc plan -", tmp_path)
    for flag in ("-n", "--namespace", "-A", "--all-namespaces", "--context", "--kubeconfig"):
        assert flag in flags, flags


@pytest.mark.parametrize("command", CLUSTER_COMMANDS)
def test_every_cluster_command_takes_kubeconfig_and_context(command: str, tmp_path: Path) -> None:
    flags = _complete(f"kubeacc {command} --", tmp_path)
    assert "--kubeconfig" in flags and "--context" in flags, flags


def test_namespace_and_all_namespaces_together_is_a_usage_error(tmp_path: Path) -> None:
    result = kubeacc("plan", "-n", "a", "-A", home=tmp_path)
    assert_one_line_error(result, 2, "-n/--namespace or -A/--all-namespaces, not both")


def test_unknown_context_names_the_known_ones(tmp_path: Path) -> None:
    doc = kubeconfig_doc("https://127.0.0.1:1")
    (tmp_path / "kc").write_text(yaml.safe_dump(doc))
    result = kubeacc("plan", "--kubeconfig", str(tmp_path / "kc"), "--context", "x", home=tmp_path)
    assert_one_line_error(result, 1, "no context 'x' (contexts: c)")


def test_folder_and_context_together_is_a_usage_error(tmp_path: Path) -> None:
    result = kubeacc("plan", str(tmp_path), "--context", "c", home=tmp_path)
    assert_one_line_error(result, 2, "give a folder or --kubeconfig/--context, not both")


def test_wide_keeps_every_column_on_a_narrow_terminal(hosts: HostFactory, tmp_path: Path) -> None:
    root = hosts.pristine("dgx-h100")
    args = ("discover", "--host-root", str(root))
    narrow = kubeacc(*args, home=tmp_path, COLUMNS="80", TTY_COMPATIBLE="1")
    wide = kubeacc(*args, "-o", "wide", home=tmp_path, COLUMNS="80", TTY_COMPATIBLE="1")
    assert wide.returncode == 0, wide.stderr
    assert "left out at this width" in narrow.stdout
    text = ANSI.sub("", wide.stdout)
    assert "left out" not in text
    header = next(line for line in text.splitlines() if "TYPE" in line)
    for column in ("VENDOR", "PCIE ROOT", "DETAILS", "NUMA"):
        assert column in header, header
    assert any("NVIDIA H100 80GB HBM3" in line and "pci" in line for line in text.splitlines())
    piped = kubeacc(*args, "-o", "wide", home=tmp_path)
    assert re.match(r"TYPE\s+NAME\s+VENDOR", piped.stdout), piped.stdout[:200]
