"""The package's layers (docs/architecture.md, "Layers"): the daemons never import each other,
and the shared layers below them import no daemon and no command.

A name, a format or a limit two daemons agree on lives in ``kubeacc.contracts``; what the node
daemons share lives in ``kubeacc.node``; the command layer (``kubeacc.cli`` and the tools it
runs) composes the daemons and may import any of them."""

from __future__ import annotations

import shutil
from pathlib import Path

from tests.test_imports import PACKAGE, import_graph

#: One package per daemon: what `kubeacc agent`, `device-plugin`, `lifecycle-agent`,
#: `controller` and `extender` run.
DAEMONS = (
    "kubeacc.agent",
    "kubeacc.deviceplugin",
    "kubeacc.lifecycle",
    "kubeacc.controller",
    "kubeacc.extender",
)
#: The command layer: composition roots and the one-shot commands and tools they run. Nothing
#: below imports them.
COMMANDS = (
    "kubeacc.cli",
    "kubeacc.status",
    "kubeacc.selftest",
    "kubeacc.testbed",
    "kubeacc.synthetic",
    "kubeacc.differential",
)


def _within(module: str, packages: tuple[str, ...]) -> str | None:
    return next((p for p in packages if module == p or module.startswith(p + ".")), None)


def violations(graph: dict[str, set[str]]) -> list[str]:
    """Every import that crosses the layers the wrong way, as ``importer -> imported (why)``."""
    out = []
    for module, imports in sorted(graph.items()):
        if _within(module, COMMANDS):
            continue
        own = _within(module, DAEMONS)
        for target in sorted(imports):
            other = _within(target, DAEMONS)
            if own and other and other != own:
                out.append(f"{module} -> {target} (one daemon into another)")
            elif not own and other:
                out.append(f"{module} -> {target} (a shared layer into a daemon)")
            elif _within(target, COMMANDS):
                out.append(f"{module} -> {target} (into the command layer)")
    return out


def test_no_daemon_imports_another_and_no_shared_layer_imports_a_daemon() -> None:
    graph = import_graph()
    assert all(any(m.startswith(d) for m in graph) for d in DAEMONS)
    assert violations(graph) == []


def _plant(tmp_path: Path, module: str, line: str) -> Path:
    """A copy of the package with ``line`` added to ``module``."""
    copy = tmp_path / "kubeacc"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__", "*.so"))
    target = copy.joinpath(*module.split(".")[1:]).with_suffix(".py")
    target.write_text(target.read_text() + f"\n{line}\n")
    return copy


def _planted_violations(tmp_path: Path, module: str, line: str) -> list[str]:
    """The rule's verdict on a copy with ``line`` planted in ``module``, which must be the only
    culprit."""
    found = violations(import_graph(_plant(tmp_path, module, line)))
    assert found and all(v.startswith(module + " -> ") for v in found)
    return found


def test_a_planted_cross_daemon_import_fails_the_rule(tmp_path: Path) -> None:
    found = _planted_violations(
        tmp_path, "kubeacc.agent.users", "from kubeacc.extender import kube  # planted"
    )
    assert "kubeacc.agent.users -> kubeacc.extender.kube (one daemon into another)" in found


def test_a_planted_import_of_a_daemon_from_a_shared_layer_fails_the_rule(tmp_path: Path) -> None:
    found = _planted_violations(
        tmp_path, "kubeacc.node.rpc", "import kubeacc.deviceplugin.server  # planted"
    )
    assert "kubeacc.node.rpc -> kubeacc.deviceplugin.server (a shared layer into a daemon)" in found


def test_a_planted_import_of_a_command_from_a_daemon_fails_the_rule(tmp_path: Path) -> None:
    found = _planted_violations(
        tmp_path, "kubeacc.controller.kept", "from kubeacc.cli import hosts  # planted"
    )
    assert "kubeacc.controller.kept -> kubeacc.cli.hosts (into the command layer)" in found


def hosts_built_below_the_commands(package: Path = PACKAGE) -> list[str]:
    """Modules outside the command layer that name ``RealHost`` (the node is chosen once, by a
    command, and handed down; kubeacc/host/real.py defines it)."""
    graph = import_graph(package)
    return sorted(
        m
        for m, imports in graph.items()
        if "kubeacc.host.real" in imports and not _within(m, (*COMMANDS, "kubeacc.host"))
    )


def test_only_the_command_layer_chooses_the_real_host() -> None:
    assert hosts_built_below_the_commands() == []


def test_a_planted_default_host_fails_the_rule(tmp_path: Path) -> None:
    copy = _plant(
        tmp_path, "kubeacc.agent.options", "from kubeacc.host.real import RealHost  # planted"
    )
    assert hosts_built_below_the_commands(copy) == ["kubeacc.agent.options"]
