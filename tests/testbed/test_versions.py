"""The testbed's lanes: one Go module per Kubernetes release, its gates checked against the
release's own feature list, chosen by ``KUBEACC_K8S_VERSION``."""

from __future__ import annotations

import json
import re
import subprocess
from pathlib import Path

import pytest

from kubeacc.testbed import build
from kubeacc.testbed.versions import (
    LANE_ENV,
    LANES,
    Lane,
    UnknownLaneError,
    feature_gate_flag,
    lane,
)

REPO = Path(__file__).resolve().parents[2]

#: ``Name: {`` then one ``{Version: ..., PreRelease: ..., LockToDefault: ...}`` per release.
_SPEC = re.compile(r"^\t(\w+): \{\n((?:\t\t.*\n)+?)\t\},?$", re.M)


def _gate_specs(lane: Lane) -> dict[str, str]:
    """Each gate of the lane's release -> its newest spec line (pkg/features/kube_features.go,
    from the Go module cache; downloaded through the lane's go.sum if missing)."""
    out = subprocess.run(
        ["go", "mod", "download", "-json", f"k8s.io/kubernetes@{lane.version}"],
        cwd=REPO / lane.module_dir,
        env=build.go_env(),
        check=True,
        capture_output=True,
        text=True,
    )
    src = Path(json.loads(out.stdout)["Dir"]) / "pkg" / "features" / "kube_features.go"
    specs: dict[str, str] = {}
    for name, body in _SPEC.findall(src.read_text()):
        lines = [ln for ln in body.splitlines() if "Version:" in ln]
        if lines:
            specs[name] = lines[-1]
    return specs


def test_default_lane_is_1_37(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LANE_ENV, raising=False)
    assert lane().version.startswith("v1.37.")
    assert lane("1.36").module_dir == "testbed-1.36"
    assert lane("v1.36") is lane("1.36")


def test_an_unknown_lane_is_a_clear_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(LANE_ENV, "1.99")
    with pytest.raises(UnknownLaneError, match=r"KUBEACC_K8S_VERSION='1\.99'.*1\.36, 1\.37"):
        lane()


@pytest.mark.parametrize("name", sorted(LANES))
def test_each_lane_module_pins_its_release(name: str) -> None:
    ln = LANES[name]
    gomod = (REPO / ln.module_dir / "go.mod").read_text()
    assert f"\tk8s.io/kubernetes {ln.version}\n" in gomod
    staging = "v0." + ln.version.split(".", 1)[1]
    assert f"k8s.io/api => k8s.io/api {staging}" in gomod
    assert ln.minor == name
    # the same Go sources in every lane (symlinks, not copies that could drift)
    main = REPO / "testbed"
    for go in sorted((REPO / ln.module_dir / "cmd").rglob("*.go")):
        rel = go.relative_to(REPO / ln.module_dir)
        assert go.resolve() == (main / rel).resolve(), rel


def test_the_lanes_build_into_different_directories() -> None:
    keys = {build.build_key(REPO / ln.module_dir) for ln in LANES.values()}
    assert len(keys) == len(LANES)


@pytest.mark.parametrize("name", sorted(LANES))
def test_each_gate_exists_and_is_neither_ga_nor_locked(name: str) -> None:
    ln = LANES[name]
    specs = _gate_specs(ln)
    assert "DynamicResourceAllocation" in specs  # the parse found the table
    for gate in ln.feature_gates:
        assert gate in specs, f"{gate} is not a gate of {ln.version}"
        assert "GA" not in specs[gate], f"{gate} is GA in {ln.version}: {specs[gate]}"
        assert "LockToDefault: true" not in specs[gate], specs[gate]
    ga = [g for g, spec in specs.items() if g.startswith("DRA") and "featuregate.GA" in spec]
    assert not set(ga) & set(ln.feature_gates)
    assert feature_gate_flag(ln.feature_gates).count("=") == len(ln.feature_gates)


def test_1_37_leaves_its_ga_dra_gates_unset() -> None:
    specs = _gate_specs(LANES["1.37"])
    for gate in ("DRAExtendedResource", "DRAResourceClaimDeviceStatus"):
        assert "GA" in specs[gate] and "LockToDefault: true" in specs[gate], specs[gate]
    for gate in ("DRADeviceTaints", "DRADeviceTaintRules"):
        assert "GA" in specs[gate], specs[gate]
    assert "Beta" in specs["DRADeviceBindingConditions"]
    assert "DRADeviceBindingConditions" in LANES["1.37"].feature_gates


def test_the_1_36_subset_names_existing_tests() -> None:
    listed = [
        ln
        for ln in (REPO / "tests" / "lane-1.36.txt").read_text().splitlines()
        if ln and not ln.startswith("#")
    ]
    assert listed
    for entry in listed:
        path, _, test = entry.partition("::")
        text = (REPO / path).read_text()
        assert "pytest.mark.cluster" in text, path
        if test:
            assert f"def {test}(" in text, entry
