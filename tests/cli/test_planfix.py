"""``kubeacc plan --fixes``: the smallest change that would make a failed claim fit, each found
by re-planning with the change made."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from kubeacc.cli import planfix
from kubeacc.cli.plan import run_plan_explained
from kubeacc.cli.planfix import NodeShapes, find_fixes
from tests.cli.clirun import kubeacc
from tests.engine.helpers import claim, device_class, exactly, gpu, node_gpus, slice_

H100 = 'device.attributes["kubeacc.io"].model.startsWith("NVIDIA H100")'
ROOT = "resource.kubernetes.io/pcieRoot"
Objs = list[dict[str, Any]]


def _planner(objs: Objs) -> set[str]:
    return {p.claim for p, _ in run_plan_explained(objs, explain=False) if p.ok}


def _held(name: str, *devices: str, pod: str | None = None) -> dict[str, Any]:
    """An allocated claim in namespace ``ns`` holding ``devices`` of node ``a``."""
    c = claim(exactly(count=len(devices)), name=name)
    c["metadata"]["namespace"] = "ns"
    results = [
        {"request": "gpus", "driver": "kubeacc.io", "pool": "a", "device": d} for d in devices
    ]
    c["status"] = {"allocation": {"devices": {"results": results}}}
    if pod:
        c["status"]["reservedFor"] = [{"resource": "pods", "name": pod, "uid": "u"}]
    return c


class _NoShapes(NodeShapes):
    """No node shapes: the tests of freeing and relaxing stay off the profile builds."""

    def shapes(self) -> list[tuple[str, str, Objs, int]]:
        return []


def _fixes(objs: Objs, target: str) -> planfix.Fixes:
    return find_fixes(objs, [target], _planner, _NoShapes(objs))


def test_freeing_the_claim_that_holds_the_device_is_found() -> None:
    objs = [
        slice_("a", node_gpus(2)),
        device_class(),
        _held("big", "gpu-0", pod="trainer"),
        claim(exactly(count=2), name="two"),
    ]
    got = _fixes(objs, "default/two")
    assert [f.to_dict() for f in got.found] == [
        {"change": "free", "claims": ["ns/big"], "pods": ["ns/trainer"], "devices": 1},
        {
            "change": "relax",
            "claim": "default/two",
            "path": "spec.devices.requests[0].exactly.count",
            "count": 2,
            "fits": 1,
        },
    ]
    assert got.lines() == [
        "free claim ns/big (1 device; pods ns/trainer)",
        "relax claim default/two: lower spec.devices.requests[0].exactly.count from 2 to 1",
    ]
    assert got.tried == 2 and not got.cut


def test_two_claims_are_freed_only_when_one_is_not_enough() -> None:
    objs = [
        slice_("a", node_gpus(2)),
        device_class(),
        _held("x", "gpu-0"),
        _held("y", "gpu-1"),
        claim(exactly(count=2), name="two"),
    ]
    got = _fixes(objs, "default/two")
    assert [f.to_dict()["claims"] for f in got.found] == [["ns/x", "ns/y"]]
    assert got.found[0].text == "free claims ns/x, ns/y (2 devices; no pod)"
    assert got.tried == 4  # x, y, then the pair; and one GPU instead of two (none is free)


def test_the_claim_holding_fewest_devices_comes_first() -> None:
    objs = [
        slice_("a", node_gpus(4)),
        device_class(),
        _held("wide", "gpu-0", "gpu-1", "gpu-2"),
        _held("narrow", "gpu-3"),
        claim(exactly(count=1), name="one"),
    ]
    got = _fixes(objs, "default/one")
    assert [f.to_dict()["claims"] for f in got.found] == [["ns/narrow"], ["ns/wide"]]


def test_a_selector_or_constraint_that_excludes_every_device_is_relaxed() -> None:
    devices = [gpu("gpu-0", root="r1"), gpu("gpu-1", root="r2")]
    c = claim(
        exactly("x", count=1),
        exactly("y", count=1, selectors=[H100]),
        name="pair",
        constraints=[{"requests": ["x", "y"], "matchAttribute": ROOT}],
    )
    objs = [slice_("a", devices), device_class(), c]
    got = _fixes(objs, "default/pair")
    # Dropping the selector alone is not enough (two roots); dropping the constraint alone
    # neither (no H100): no single change, and both were tried.
    assert got.found == [] and got.tried == 2
    assert got.lines() == ["no single change of the 2 tried makes it fit"]

    c["spec"]["devices"]["constraints"] = []
    got = _fixes(objs, "default/pair")
    assert [f.to_dict() for f in got.found] == [
        {
            "change": "relax",
            "claim": "default/pair",
            "path": "spec.devices.requests[1].exactly.selectors[0]",
            "dropped": H100,
        }
    ]


def test_a_constraint_is_relaxed() -> None:
    devices = [gpu("gpu-0", root="r1"), gpu("gpu-1", root="r2")]
    c = claim(
        exactly("x", count=1),
        exactly("y", count=1),
        name="pair",
        constraints=[{"requests": ["x", "y"], "matchAttribute": ROOT}],
    )
    got = _fixes([slice_("a", devices), device_class(), c], "default/pair")
    assert [(f.kind, f.detail["path"]) for f in got.found] == [
        ("relax", "spec.devices.constraints[0]")
    ]


def test_the_largest_count_that_fits_is_found_for_each_request() -> None:
    request = {
        "name": "gpu",
        "firstAvailable": [
            {"name": "h100", "deviceClassName": "gpu.kubeacc.io", "count": 4},
            {"name": "any", "deviceClassName": "gpu.kubeacc.io", "count": 3},
        ],
    }
    objs = [
        slice_("a", node_gpus(4)),
        device_class(),
        _held("wide", "gpu-0", "gpu-1"),
        claim(request, name="many"),
    ]
    got = _fixes(objs, "default/many")
    lowered = [
        (f.detail["path"], f.detail["count"], f.detail["fits"])
        for f in got.found
        if "count" in f.detail
    ]
    assert lowered == [
        ("spec.devices.requests[0].firstAvailable[0].count", 4, 2),
        ("spec.devices.requests[0].firstAvailable[1].count", 3, 2),
    ]
    # A request of all devices or of one is never lowered.
    one = claim(exactly(count=1), exactly("all", allocationMode="All"), name="fixed")
    assert not list(planfix._counted(one))


def test_a_first_available_subrequest_selector_is_relaxed() -> None:
    request = {
        "name": "gpu",
        "firstAvailable": [
            {
                "name": "h100",
                "deviceClassName": "gpu.kubeacc.io",
                "selectors": [{"cel": {"expression": H100}}],
            },
        ],
    }
    objs = [slice_("a", node_gpus(1)), device_class(), claim(request, name="fa")]
    got = _fixes(objs, "default/fa")
    assert [f.detail["path"] for f in got.found] == [
        "spec.devices.requests[0].firstAvailable[0].selectors[0]"
    ]


def test_the_search_stops_at_its_bound_and_says_so(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planfix, "MAX_RUNS", 2)
    objs = [
        slice_("a", node_gpus(3)),
        device_class(),
        *(_held(n, f"gpu-{i}") for i, n in enumerate("xyz")),
        claim(exactly(count=3), name="three"),
    ]
    got = _fixes(objs, "default/three")
    # Each kind of change has its own bound: 2 to free, 2 to lower the count (2, then 1).
    assert got.cut and got.tried == 4 and got.found == []
    assert got.lines()[-1] == "(a search stopped at 2 re-plans; more changes were not tried)"


def test_a_cut_free_search_leaves_relaxing_its_own_bound(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(planfix, "MAX_RUNS", 2)
    objs = [
        slice_("a", node_gpus(4)),
        device_class(),
        *(_held(n, f"gpu-{i}") for i, n in enumerate("xyz")),
        claim(exactly(count=1, selectors=[H100.replace("H100", "h1")]), name="one"),
    ]
    got = _fixes(objs, "default/one")
    # gpu-3 is free but its model is "h100": freeing finds nothing in its 2 runs; relaxing does
    assert got.cut and got.tried == 3
    assert [f.kind for f in got.found] == ["relax"]


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    docs = [
        slice_("a", node_gpus(2, model="NVIDIA L4")),
        device_class(),
        _held("holder", "gpu-0", pod="holder-pod"),
        claim(exactly(count=1, selectors=[H100]), name="h100"),
    ]
    path = tmp_path_factory.mktemp("fixes")
    (path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    return path


def test_node_shapes_that_fit_come_fewest_devices_first(folder: Path, tmp_path: Path) -> None:
    res = kubeacc("plan", str(folder), "--fixes", "-o", "json", home=tmp_path)
    assert res.returncode == 1, res.stderr
    (h100,) = json.loads(res.stdout)
    found = h100["fixes"]["found"]
    assert found[0] == {
        "change": "relax",
        "claim": "default/h100",
        "path": "spec.devices.requests[0].exactly.selectors[0]",
        "dropped": H100,
    }
    shapes = [f for f in found if f["change"] == "add-node"]
    assert [f["profile"] for f in shapes] == ["h100-l4", "dgx-h100", "large-mixed"]
    assert [f["devices"] for f in shapes] == sorted(f["devices"] for f in shapes)
    # No claim's devices would help: the only held one is an L4.
    assert not [f for f in found if f["change"] == "free"]
    # Each suggested node really makes it fit.
    for f in shapes:
        again = kubeacc(
            "plan", str(folder), "--add-node", f["profile"], "-o", "json", home=tmp_path
        )
        assert again.returncode == 0 and json.loads(again.stdout)[0]["allocated"], f


def test_the_table_lists_the_fixes_and_without_the_option_none_are_searched(
    folder: Path, tmp_path: Path
) -> None:
    res = kubeacc("plan", str(folder), "--fixes", home=tmp_path)
    assert res.returncode == 1
    tail = res.stdout.split("Smallest changes that would make it fit", 1)[1]
    assert "default/h100:\n  relax claim default/h100: drop spec.devices" in tail
    assert "add a node like profile h100-l4 (3 devices; --add-node h100-l4)" in tail
    plain = kubeacc("plan", str(folder), "-o", "json", home=tmp_path)
    assert "fixes" not in json.loads(plain.stdout)[0]
    assert "Smallest changes" not in kubeacc("plan", str(folder), home=tmp_path).stdout
