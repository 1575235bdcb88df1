"""The allocator harness builds per Kubernetes release, either selectable."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

from kubeacc.differential import build
from kubeacc.engine import celgo
from kubeacc.engine.release import release
from kubeacc.testbed.build import BuildError
from kubeacc.testbed.versions import LANES


def test_default_is_the_release_the_engine_follows(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(build.VERSION_ENV, raising=False)
    assert build.harness() == build.HARNESSES[build.DEFAULT]
    # the main lane's release, and the one the engine follows unless told otherwise
    assert build.harness().release == LANES["1.37"].version
    assert release(build.harness().release).name == release().name == "1.37"


def test_env_selects_the_main_lane_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.37")
    assert build.harness().release == "v1.37.2" == LANES["1.37"].version
    assert build.harness().build_args() == ["go", "build", "-modfile", "go.mod"]


def test_env_selects_the_compatibility_harness(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.36")
    which = build.harness()
    assert which.release == "v1.36.3" == LANES["1.36"].version
    assert which.build_args() == ["go", "build", "-modfile", "go-1.36.mod", "-tags", "k8s136"]


def test_unknown_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.35")
    with pytest.raises(BuildError, match=r"1\.35"):
        build.harness()
    assert build.main(["1.99"]) == 1


def test_every_harness_has_its_module_files() -> None:
    src = build.source_dir()
    for which in build.HARNESSES.values():
        mod = src / which.modfile
        text = mod.read_text()
        minor = which.release.removeprefix("v1.")
        assert f"k8s.io/dynamic-resource-allocation v0.{minor}" in text, which
        assert mod.with_suffix(".sum").is_file(), which


def test_binaries_differ_per_release_and_name_it() -> None:
    paths = {}
    for name, which in build.HARNESSES.items():
        path = build.ensure_built(which)
        assert which.release in path.parent.name
        out = subprocess.run([str(path), "-version"], capture_output=True, text=True, check=True)
        assert out.stdout.strip() == which.release, name
        paths[name] = path
    assert len(set(paths.values())) == len(paths)


#: the allocator's feature per gate of kube-scheduler v1.37.2 (DeviceBindingAndStatus also needs
#: DRAResourceClaimDeviceStatus, GA in v1.37)
GATE_OF_FEATURE_137 = {
    "PartitionableDevices": "DRAPartitionableDevices",
    "DeviceBindingAndStatus": "DRADeviceBindingConditions",
    "ConsumableCapacity": "DRAConsumableCapacity",
    "FractionalCapacityRange": "DRAFractionalCapacityRange",
    "ListTypeAttributes": "DRAListTypeAttributes",
    "OptionalNodeOperations": "DRAOptionalNodeOperations",
    "DerivedAttributes": "DRADerivedAttributes",
    "CompatibilityGroups": "DRADeviceCompatibilityGroups",
}
#: GA in v1.37.2 and on whatever the lane sets
GA_FEATURES_137 = {"AdminAccess", "PrioritizedList", "DeviceTaints"}


def _go_features(path: str) -> dict[str, bool]:
    text = (build.source_dir() / path).read_text()
    body = re.search(r"var features = structured\.Features\{(.*?)\n\}", text, re.S)
    assert body is not None, path
    return {k: v == "true" for k, v in re.findall(r"(\w+):\s*(true|false)", body.group(1))}


def test_the_v137_harness_runs_with_the_main_lanes_gates() -> None:
    """features_137.go hands the allocator what kube-scheduler gets from LANE_1_37's gates: a
    gate added to (or dropped from) the lane must show in the harness too."""
    got = _go_features("features_137.go")
    gates = LANES["1.37"].feature_gates
    want = {f: True for f in GA_FEATURES_137}
    want.update({f: gates.get(g, False) for f, g in GATE_OF_FEATURE_137.items()})
    assert got == want
    unmapped = set(gates) - set(GATE_OF_FEATURE_137.values()) - {"ResourceHealthStatus"}
    assert not unmapped, f"lane gates the harness does not account for: {unmapped}"


def test_gates_env_selects_the_lane_that_enforces_compatibility_groups(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(build.VERSION_ENV, "1.37")
    monkeypatch.setenv(build.GATES_ENV, "DRADeviceCompatibilityGroups=true")
    which = build.harness()
    assert which.gates == (("DRADeviceCompatibilityGroups", True),)
    assert which.run_args() == ["-feature-gates", "DRADeviceCompatibilityGroups=true"]
    # the same binary as the main lane: gates are a run argument, not a build
    assert build.binary_path(which=which) == build.binary_path(which=build.HARNESSES["1.37"])
    monkeypatch.delenv(build.GATES_ENV)
    assert build.harness().run_args() == []


def test_gates_the_engine_does_not_follow_are_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(BuildError, match="DRAFancy"):
        build.harness("1.37", "DRAFancy=true")
    with pytest.raises(BuildError, match=r"1\.36"):
        build.harness("1.36", "DRADeviceCompatibilityGroups=true")
    with pytest.raises(BuildError, match="NAME=true"):
        build.harness("1.37", "DRADeviceCompatibilityGroups")


def test_the_binary_takes_gates_and_refuses_unknown_ones() -> None:
    path = build.ensure_built(build.HARNESSES["1.37"])

    def run(gates: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(path), "-feature-gates", gates],
            input="",
            capture_output=True,
            text=True,
            check=False,
        )

    ok = run("DRADeviceCompatibilityGroups=true")
    assert ok.returncode == 0, ok.stderr
    bad = run("DRAFancy=true")
    assert bad.returncode == 2 and "DRAFancy" in bad.stderr


def test_cel_library_pins_the_allocators_modules() -> None:
    """kube-scheduler's CEL library is built from exactly the modules the main lane's allocator
    is: its go.mod differs only in the module's name, its go.sum not at all."""
    lib, alloc = build.celgo_source_dir(), build.source_dir()
    main = build.HARNESSES[build.DEFAULT]
    assert (lib / "go.sum").read_text() == (alloc / "go.sum").read_text()
    ours = (lib / "go.mod").read_text().splitlines()
    theirs = (alloc / main.modfile).read_text().splitlines()
    assert ours[1:] == theirs[1:]
    assert ours[0] == "module kubeacc.io/celgo"
    assert f'"{main.release}"' in (lib / "main.go").read_text()


def test_cel_library_names_its_release_and_abi(celgo_library: Path) -> None:
    assert celgo_library.name == celgo.LIBRARY
    assert celgo.library_path() == celgo_library
    assert celgo.version() == {"abi": celgo.ABI, "kubernetes": build.CELGO_RELEASE}


def test_cel_library_refuses_what_the_scheduler_refuses(celgo_library: Path) -> None:
    device = celgo.device_json("gpu.example.com", {"model": ("string", "a100")}, {}, False)
    assert celgo.matches('device.attributes["gpu.example.com"].model == "a100"', device)
    with pytest.raises(celgo.GoCelError, match="compilation failed") as e:
        celgo.matches("1 +", device)
    assert e.value.compile_error
    # a bool is required, as the scheduler's compiler demands
    with pytest.raises(celgo.GoCelError) as e:
        celgo.matches("1", device)
    assert e.value.compile_error
    with pytest.raises(celgo.GoCelError, match="actual cost limit exceeded") as e:
        celgo.matches("lists.range(1200).all(i, lists.range(1200).all(j, i + j >= 0))", device)
    assert not e.value.compile_error
