"""The long-running commands start through their slim entry path (kubeacc/cli/entry.py).

Each daemon is started for real as ``kubeacc <command>`` under ``python -X importtime`` (the
node daemons on a synthetic host, the ones that talk to the API server against a kubeconfig
whose server refuses connections) and stopped once its log shows it got past its start-up.
The modules it imported then must not include the terminal UI, the planner or the allocation
engine, and must stay under a budget. This guards what a daemon loads; it times nothing
(bench/daemon_start.py measures that).
"""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from kubeacc.cli.entry import DAEMONS
from tests.cli.clirun import ended
from tests.hosts import HostFactory

#: Modules (and their submodules) no daemon may import: typer too, the daemons parse their
#: options with kubeacc/cli/argv.py (typer answers only --help and bad command lines).
FORBIDDEN = (
    "rich",
    "typer",
    "kubeacc.cli.main",
    "kubeacc.cli.plan",
    "kubeacc.cli.demo",
    "kubeacc.engine.engine",
    "kubeacc.engine.search",
    "kubeacc.engine.claims",
    "kubeacc.engine.celenv",
    "cel",
)
#: What the device plugin loads only when asked (issue 30): YAML for a config, units table or
#: admin discovery file it was given, the extender's want parsing at the first shared
#: allocation, the topology at the first GetPreferredAllocation; the DRA checkpoint is the
#: agent's (kubeacc.node.sharelimit names it for types).
_DEVICE_PLUGIN_DEFERRED = (
    "yaml",
    "kubeacc.extender",
    "kubeacc.agent.dra.checkpoint",
    "kubeacc.topology",
)
#: What the device plugin loads only with --metrics-address (tests/cli/test_deviceplugin_start.py):
#: without it no one could read the series, so it keeps none and serves no probes.
_DEVICE_PLUGIN_UNLESS_METRICS = ("prometheus_client", "kubeacc.metrics", "kubeacc.netserve")
#: Modules one daemon may not import: the agent maps a shared GPU's unit IDs without the device
#: plugin's allocation code or the extender (kubeacc.contracts.unitid); neither node
#: daemon imports pydantic.
FORBIDDEN_FOR = {
    # The node daemons read their options without typer's pydantic conversion
    # (kubeacc/cli/argv.py), and the agent checks policies, opaque configs and fault
    # reports without the pydantic API types (kubeacc/crds/schemastructs.py, opaque.py):
    # pydantic would be ~9 MB resident for the life of the node.
    "agent": (
        "kubeacc.deviceplugin.shared",
        "kubeacc.extender",
        "pydantic",
        "pydantic_core",
        # Loaded by what uses them, none of it before registration: the FPGA binder (with a
        # bitstream library), the DeviceClasses (--apply-classes), the telemetry's faults.
        "kubeacc.agent.dra.fpga.binding",
        "kubeacc.agent.dra.classes",
        "kubeacc.agent.telemetry",
    ),
    "device-plugin": (
        "pydantic",
        "pydantic_core",
        *_DEVICE_PLUGIN_DEFERRED,
        *_DEVICE_PLUGIN_UNLESS_METRICS,
    ),
    # The life-cycle agent reads operations, Accelerators and policies through the same
    # schema Structs (kubeacc/crds/apiread.py), on every node as well.
    "lifecycle-agent": ("pydantic", "pydantic_core"),
    # The controller reads its objects through the same Structs (kubeacc/crds/controlread.py),
    # with the CRDs' rules between fields as plain code (kubeacc/crds/rules.py).
    "controller": ("pydantic", "pydantic_core"),
}
#: At most this many modules per daemon (what each imported when the budget was set, plus
#: about 3 %: a new dependency is a decision, not a side effect). Set with the argparse path
#: (kubeacc/cli/argv.py), without typer: agent 654 and device-plugin 449 (no pydantic either),
#: lifecycle-agent 578, controller 554, extender 505; then (issue 30, item 1) YAML, the
#: extender's want parsing and the DRA checkpoint out of the device plugin (425), the FPGA
#: binder, DeviceClasses and telemetry faults out of the agent's start (650); then
#: prometheus_client and the probe server out of the device plugin without --metrics-address
#: (373); then pydantic out of the life-cycle agent (520), then out of the controller (498);
#: then the agent's share accounting service and namespace requirement (issue 44: 668, with
#: Cyborg's client loaded only for ``--inventory cyborg``); then the health API's v1 stubs and
#: the stale-holder check of prepares (issue 46: 672).
BUDGET = {
    "agent": 672,
    "device-plugin": 385,
    "lifecycle-agent": 536,
    "controller": 513,
    "extender": 520,
}
#: The line a daemon logs once it has frozen its start-up objects (kubeacc/gcfreeze.py).
FROZEN = "start-up objects frozen"
#: A log line each daemon writes once its start-up is behind it (None: it exits by itself).
STARTED = {
    "agent": FROZEN,
    "device-plugin": FROZEN,
    "lifecycle-agent": "first discovery",
    "controller": "leader election",
    "extender": None,
}
_IMPORT = re.compile(r"^import time:\s+\d+ \|\s+\d+ \|\s*(\S+)$")

_REFUSING = """\
apiVersion: v1
kind: Config
clusters: [{name: c, cluster: {server: "https://127.0.0.1:9"}}]
users: [{name: u, user: {token: not-used}}]
contexts: [{name: c, context: {cluster: c, user: u}}]
current-context: c
"""


def _args(name: str, host: Path, work: Path) -> list[str]:
    kubeconfig = work / "kubeconfig"
    kubeconfig.write_text(_REFUSING)
    api = [f"--kubeconfig={kubeconfig}", "--context=c"]  # the conventions, on the slim path
    node = ["--node-name=n", f"--host-root={host}", *api]
    return {
        "agent": [
            *node,
            f"--kubelet-root={work / 'kubelet'}",
            f"--cdi-dir={work / 'cdi'}",
            f"--state-dir={work / 'state'}",
        ],
        "device-plugin": [f"--host-root={host}", f"--plugin-dir={work}", "--type=gpu"],
        "lifecycle-agent": [*node, f"--bitstream-dir={work / 'bitstreams'}"],
        "controller": api,
        "extender": [*api, "--insecure-http", "--address=127.0.0.1:0"],
    }[name]


def imported(name: str, args: list[str], log: Path, timeout: float = 60) -> set[str]:
    """The modules ``kubeacc name args`` imported by the time its start-up line appeared."""
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-X", "importtime", "-m", "kubeacc.cli", name, *args],
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    marker = STARTED[name]
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None and (marker is None or marker not in log.read_text()):
            assert time.monotonic() < deadline, f"{name} did not start:\n{log.read_text()}"
            time.sleep(0.05)
    finally:
        proc.terminate()
        if not ended(proc, 15, dump=True):
            raise AssertionError(f"still running 15 s after SIGTERM:\n{log.read_text()[-6000:]}")
    text = log.read_text()
    assert marker is not None or "cannot reach the API server" in text, text
    return {m[1] for line in text.splitlines() if (m := _IMPORT.match(line))}


@pytest.mark.parametrize("name", sorted(DAEMONS))
def test_daemon_imports_only_what_it_runs(name: str, hosts: HostFactory, tmp_path: Path) -> None:
    host = hosts.pristine("dgx-h100")
    modules = imported(name, _args(name, host, tmp_path), tmp_path / "daemon.log")
    assert "kubeacc.cli.entry" in modules  # it went through the console script's entry
    forbidden = FORBIDDEN + FORBIDDEN_FOR.get(name, ())
    bad = sorted(m for m in modules if any(m == f or m.startswith(f"{f}.") for f in forbidden))
    assert not bad, f"kubeacc {name} imports {bad}"
    assert len(modules) <= BUDGET[name], (
        f"kubeacc {name} imports {len(modules)} modules, budget {BUDGET[name]}"
    )
    if STARTED[name] is not None:  # a serving daemon took its start-up out of the GC's sight
        assert FROZEN in (tmp_path / "daemon.log").read_text()


def test_every_daemon_has_a_budget_and_a_start_line() -> None:
    assert set(DAEMONS) == set(BUDGET) == set(STARTED)


def test_the_full_application_is_what_the_budget_keeps_out(tmp_path: Path) -> None:
    """The guard can fail: the interactive commands do load the terminal UI and the engine."""
    out = subprocess.run(
        [sys.executable, "-X", "importtime", "-m", "kubeacc.cli", "plan", "--help"],
        capture_output=True,
        text=True,
        check=True,
    )
    modules = {m[1] for line in out.stderr.splitlines() if (m := _IMPORT.match(line))}
    assert "rich" in modules
    assert "kubeacc.cli.plan" in modules
