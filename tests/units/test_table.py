from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.units.defaults import DEFAULT_UNITS
from kubeacc.units.names import matches, tokens
from kubeacc.units.table import (
    UnitTableError,
    active_table,
    build,
    default_table,
    load,
    parse,
    use_table,
)


@pytest.mark.parametrize(
    ("model", "units"),
    [
        ("NVIDIA H100 80GB HBM3", 989),
        ("NVIDIA H100 PCIe", 756),
        ("NVIDIA H100 NVL", 835),
        ("NVIDIA H200", 989),
        ("NVIDIA B200", 2250),
        ("NVIDIA A100-SXM4-80GB", 312),
        ("NVIDIA A100-PCIE-40GB", 312),
        ("NVIDIA A10", 125),
        ("Tesla V100-SXM2-16GB", 125),
        ("Tesla V100-PCIE-32GB", 112),
        ("Tesla T4", 65),
        ("Tesla P40", 12),
        ("Tesla K40m", 4),
        ("NVIDIA L4", 121),
        ("NVIDIA L40S", 362),
        ("KUNLUN AI accelerator R200", 128),
        ("AMD Instinct MI210", 0),
        ("NVIDIA A10G", 0),
    ],
)
def test_default_table_finds_the_most_specific_entry(model: str, units: int) -> None:
    assert default_table().units_for(model) == units


def test_names_compare_whole_tokens_in_order() -> None:
    assert tokens("NVIDIA A100-SXM4-40GB") == ("nvidia", "a100", "sxm4", "40gb")
    assert matches(tokens("a100 40gb"), tokens("NVIDIA A100-SXM4-40GB"))
    assert not matches(tokens("a10"), tokens("NVIDIA A100-SXM4-40GB"))
    assert not matches(tokens("40gb a100"), tokens("NVIDIA A100-SXM4-40GB"))
    assert not matches((), tokens("anything"))


def test_every_default_has_a_source() -> None:
    assert all(units > 0 and source for _, units, source in DEFAULT_UNITS)


def test_admin_entries_override_and_extend_the_defaults() -> None:
    t = parse(
        {
            "apiVersion": "kubeacc.io/v1alpha1",
            "kind": "UnitTable",
            "unit": "V100 = 10",
            "models": {"H100": 80, "A10G": 35},
        }
    )
    assert t.units_for("NVIDIA H100 80GB HBM3") == 80
    assert t.units_for("NVIDIA H100 PCIe") == 756  # the more specific default still wins
    assert t.units_for("NVIDIA A10G") == 35
    assert t.unit == "V100 = 10"
    alone = parse({"defaults": False, "models": {"l4": 3}})
    assert alone.units_for("NVIDIA L4") == 3 and alone.units_for("NVIDIA H100 80GB HBM3") == 0


def test_a_configmap_carries_the_table(tmp_path: Path) -> None:
    path = tmp_path / "cm.yaml"
    path.write_text(
        "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: kubeacc-units}\n"
        "data:\n  units.yaml: |\n    models: {T4: 7}\n"
    )
    assert load(path).units_for("Tesla T4") == 7


@pytest.mark.parametrize(
    ("doc", "message"),
    [
        ({"models": {"H100": "fast"}}, "models.H100: units must be a whole number from 1"),
        ({"models": {"H100": 0}}, "models.H100: units must be a whole number from 1"),
        ({"models": {"H100": 2.5}}, "not 2.5"),
        ({"models": {"H100": True}}, "not True"),
        ({"models": {"--": 3}}, "'--' is not a model name"),
        ({"models": {"H100 pcie": 1, "h100-PCIe": 2}}, "the same model as 'H100 pcie'"),
        ({"models": ["H100"]}, "models: a mapping of model name to units"),
        ({"model": {}}, "unknown field(s): model"),
        ({"kind": "Other"}, "expected apiVersion kubeacc.io/v1alpha1, kind UnitTable"),
        ({"defaults": "yes"}, "defaults: true or false"),
        ({"kind": "ConfigMap", "data": {}}, "ConfigMap has no data key 'units.yaml'"),
        ({"kind": "ConfigMap", "data": {"units.yaml": "models: [1"}}, "not valid YAML"),
        ([1, 2], "not a UnitTable (a mapping), but list"),
    ],
)
def test_bad_tables_are_refused_with_the_entry_named(doc: object, message: str) -> None:
    with pytest.raises(UnitTableError) as err:
        parse(doc, "units.yaml")
    assert message in str(err.value)
    assert str(err.value).startswith("units.yaml")
    assert "\n" not in str(err.value)


def test_unreadable_files(tmp_path: Path) -> None:
    with pytest.raises(UnitTableError, match="cannot read"):
        load(tmp_path / "missing.yaml")
    bad = tmp_path / "bad.yaml"
    bad.write_text("models: {a: [}\n")
    with pytest.raises(UnitTableError, match="not valid YAML"):
        load(bad)


def test_the_active_table_is_the_processs_choice() -> None:
    mine = build({"L4": 1}, defaults=False)
    try:
        use_table(mine)
        assert active_table().units_for("NVIDIA L4") == 1
    finally:
        use_table(None)
    assert active_table().units_for("NVIDIA L4") == 121


def test_the_default_ranking_never_restricts() -> None:
    t = parse({"preferModels": ["H100", "A100"]})
    assert t.prefer.rank("h100-pcie") == 0 and t.prefer.rank("a100-sxm4-40gb") == 1
    assert t.prefer.rank("l4") == 2  # any other model: last, still allowed
    assert parse({"preferModels": "H100,*"}).prefer.rank("l4") == 1
    assert parse({}).prefer.empty
    with pytest.raises(UnitTableError, match=r"units\.yaml: preferModels: .* must come last"):
        parse({"preferModels": "*,H100"}, "units.yaml")
    with pytest.raises(UnitTableError, match="preferModels: a list of model names"):
        parse({"preferModels": 3})
