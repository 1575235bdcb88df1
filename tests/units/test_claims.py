"""Model preferences as DRA firstAvailable claims, and kubeacc plan's explanation of them."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import typer
import yaml
from typer.testing import CliRunner

from kubeacc.agent.dra.classes import device_classes
from kubeacc.agent.dra.devices import slice_devices
from kubeacc.agent.dra.slices import build_slices
from kubeacc.cli.claim import claim_command
from kubeacc.cli.plan import plan, run_plan_explained
from kubeacc.engine.engine import Engine
from kubeacc.synthetic import profiles
from kubeacc.units.claims import ClaimSpecError, model_selector, preference_claim
from kubeacc.units.table import build
from tests.hosts import discover


@pytest.fixture(scope="module")
def mixed(tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, Any]]:
    """Slices of a node with 2 H100 and 1 L4, and the DeviceClasses."""
    host = profiles.build("h100-l4", tmp_path_factory.mktemp("h") / "host")
    devices = slice_devices(discover(host, nvml="on"))
    return [*build_slices("mixed", None, devices, 1), *device_classes()]


def _models(engine_objs: list[dict[str, Any]], claims: list[dict[str, Any]]) -> list[str]:
    slices = [o for o in engine_objs if o["kind"] == "ResourceSlice"]
    classes = [o for o in engine_objs if o["kind"] == "DeviceClass"]
    engine = Engine(slices, classes)
    out = []
    for c in claims:
        p = engine.allocate(c)
        out.append(
            ",".join(r["request"] for r in p.allocation["devices"]["results"])
            if p.allocation
            else "-"
        )
    return out


def test_the_selector_matches_models_by_tokens(mixed: list[dict[str, Any]]) -> None:
    assert "(?i)" in model_selector("H100")
    c = [preference_claim(f"c{i}", "H100, L4") for i in range(4)]
    for i, claim in enumerate(c):
        claim["metadata"]["namespace"] = "default"
        claim["metadata"]["uid"] = f"u{i}"
    assert _models(mixed, c) == [
        "accelerators/h100",
        "accelerators/h100",
        "accelerators/l4",
        "-",
    ]
    a10 = preference_claim("a10", "A10")  # must not take the H100s or L4 by substring
    assert _models(mixed, [a10]) == ["-"]


def test_units_become_a_device_count_per_model(mixed: list[dict[str, Any]]) -> None:
    c = preference_claim("u", "L4,H100", units=200)
    subs = c["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [(s["name"], s["count"]) for s in subs] == [("l4", 2), ("h100", 1)]
    assert c["spec"]["devices"]["constraints"] == [
        {"requests": ["accelerators"], "matchAttribute": "kubeacc.io/model"}
    ]
    # one L4 on the node: 2 are not there, so the H100 it is
    assert _models(mixed, [c]) == ["accelerators/h100"]
    table = build({"L4": 100}, defaults=False)
    with pytest.raises(ClaimSpecError, match="H100: no entry in the unit table"):
        preference_claim("u", "L4,H100", units=200, table=table)


@pytest.mark.parametrize(
    ("prefer", "kw", "message"),
    [
        ("*", {}, "name at least one model"),
        ("H100,*", {"units": 10}, "'\\*' has no units per device"),
        (",".join(f"m{i}" for i in range(9)), {}, "at most 8"),
    ],
)
def test_bad_preferences(prefer: str, kw: dict[str, Any], message: str) -> None:
    with pytest.raises(ClaimSpecError, match=message):
        preference_claim("c", prefer, **kw)


def test_plan_explains_which_model_and_why_not_the_first(
    mixed: list[dict[str, Any]], tmp_path: Path
) -> None:
    claims = [preference_claim(f"c{i}", "H100,L4", namespace="default") for i in range(4)]
    explained = run_plan_explained([*mixed, *claims])
    lines = {p.claim: notes for p, notes in explained}
    assert lines["default/c0"][0].startswith("accelerators: h100 (choice 1 of 2) on mixed: ")
    assert lines["default/c2"][0].startswith("accelerators: l4 (choice 2 of 2) on mixed: ")
    assert lines["default/c2"][1].startswith("  h100 not taken: mixed: ")
    assert lines["default/c3"][0] == "accelerators: none of h100, l4 fits"
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all([*mixed, *claims]))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    out = json.loads(res.stdout)
    assert out[2]["preference"][0].startswith("accelerators: l4")
    table = CliRunner().invoke(app, [str(tmp_path)])
    assert "Model preferences (firstAvailable):" in table.stdout
    assert "h100 not taken" in table.stdout


def test_claim_command_prints_a_template_or_a_one_line_error() -> None:
    app = typer.Typer()
    app.command()(claim_command)
    res = CliRunner().invoke(app, ["gpu", "--prefer", "H100,A100", "--template", "--units", "500"])
    assert res.exit_code == 0
    doc = yaml.safe_load(res.stdout)
    assert doc["kind"] == "ResourceClaimTemplate"
    subs = doc["spec"]["spec"]["devices"]["requests"][0]["firstAvailable"]
    assert [(s["name"], s["count"]) for s in subs] == [("h100", 1), ("a100", 2)]
    bad = CliRunner().invoke(app, ["gpu", "--prefer", "*,H100"])
    assert bad.exit_code == 2 and "must come last" in bad.output
