"""kubeacc plan over a folder of YAML."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import typer
import yaml
from typer.testing import CliRunner

from kubeacc.cli.plan import plan
from tests.cli.clirun import kubeacc
from tests.engine.helpers import claim, device_class, exactly, gpu, node_gpus, slice_
from tests.hosts import HostFactory


def test_plan_folder_json_and_table(tmp_path: Path) -> None:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(count=2), name="fits"),
        claim(exactly(count=3), name="too-big"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert out[0]["allocated"] and out[0]["node"] == "a"
    assert not out[1]["allocated"] and "need 3" in json.dumps(out[1]["explanation"])
    res = CliRunner().invoke(app, [str(tmp_path)])
    assert "default/fits" in res.stdout


def test_plan_says_how_each_share_is_enforced(tmp_path: Path) -> None:
    def shared(name: str, how: str) -> dict[str, object]:
        dev = gpu(name, allowMultipleAllocations=True)
        dev["attributes"]["shareEnforcement"] = {"string": how}
        return dev

    share = {"requests": {"memory": "10Gi"}}
    docs = [
        slice_("a", [shared("g0", "library")]),
        slice_("b", [shared("g1", "advisory")]),
        device_class(),
        claim(exactly(count=1, capacity=share), name="one"),
        # g0 has 70Gi left: this share goes to g1
        claim(exactly(count=1, capacity={"requests": {"memory": "75Gi"}}), name="two"),
        claim(exactly(count=1), name="whole"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    out = json.loads(CliRunner().invoke(app, [str(tmp_path), "-o", "json"]).stdout)
    assert [o.get("shares") for o in out] == [{"gpus": "library"}, {"gpus": "advisory"}, None]
    table = CliRunner().invoke(app, [str(tmp_path)]).stdout
    assert "(share, library)" in table and "(share, advisory)" in table


def _pod(name: str, *claims: str, made: dict[str, str] | None = None) -> dict[str, object]:
    pod: dict[str, object] = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {
            "containers": [{"name": "app", "image": "app"}],
            "resourceClaims": [
                {"name": f"e{i}", "resourceClaimName": c} for i, c in enumerate(claims)
            ]
            + [{"name": entry, "resourceClaimTemplateName": "t"} for entry in made or {}],
        },
    }
    if made:
        pod["status"] = {
            "resourceClaimStatuses": [
                {"name": entry, "resourceClaimName": c} for entry, c in made.items()
            ]
        }
    return pod


def test_plan_places_a_pods_claims_together(tmp_path: Path) -> None:
    h100 = 'device.attributes["kubeacc.io"].model == "h100"'
    base = [
        slice_("a", [gpu("gpu-0", model="h100"), gpu("gpu-1", model="a100")]),
        device_class(),
        claim(exactly(), name="any"),
        claim(exactly(selectors=[h100]), name="h100"),
    ]
    app = typer.Typer()
    app.command()(plan)
    # Without the pod, claim by claim: the first takes the h100, the second cannot fit.
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(base))
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 1
    assert [o["allocated"] for o in json.loads(res.stdout)] == [True, False]
    # With the pod that uses both (one named, one made from a template): placed together.
    (tmp_path / "all.yaml").write_text(
        yaml.safe_dump_all([*base, _pod("trainer", "any", made={"hot": "h100"})])
    )
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 0, res.stdout
    out = json.loads(res.stdout)
    assert [(o["claim"], o["pod"], o["node"]) for o in out] == [
        ("default/any", "default/trainer", "a"),
        ("default/h100", "default/trainer", "a"),
    ]
    assert [[r["device"] for r in o["allocation"]["devices"]["results"]] for o in out] == [
        ["gpu-1"],
        ["gpu-0"],
    ]
    table = CliRunner().invoke(app, [str(tmp_path)]).stdout
    header = next(line for line in table.splitlines() if "CLAIM" in line)
    assert header.split()[:2] == ["POD", "CLAIM"]
    assert table.count("default/trainer") == 2


def test_plan_does_not_place_a_pod_whose_claim_is_missing(tmp_path: Path) -> None:
    docs = [
        slice_("a", node_gpus(2)),
        device_class(),
        claim(exactly(), name="here"),
        _pod("p", "here", "gone"),
        claim(exactly(), name="alone"),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    assert res.exit_code == 1
    out = json.loads(res.stdout)
    assert [(o["claim"], o["allocated"]) for o in out] == [
        ("default/here", False),
        ("default/alone", True),
    ]
    assert "claim default/gone not found" in json.dumps(out[0]["explanation"])


def test_plan_says_why_memory_shares_miss_gpus_of_unknown_memory(
    hosts: HostFactory, tmp_path: Path
) -> None:
    """NVML not found: discovery knows no GPU memory, the agent publishes the GPUs whole, and
    plan names that reason beside the allocator's '0 pass selector ...'."""
    from kubeacc.agent.dra.classes import device_classes
    from kubeacc.agent.dra.devices import slice_devices
    from kubeacc.agent.dra.sharing.limits import parse_selectors
    from tests.hosts import discover

    def folder(nvml: str) -> Path:
        inv = discover(hosts.pristine("l4-pair"), nvml=nvml)
        devices = slice_devices(inv, parse_selectors(["all"]))
        out = tmp_path / nvml
        out.mkdir()
        share = {
            "name": "gpu",
            "exactly": {
                "deviceClassName": "gpu.kubeacc.io",
                "selectors": [{"cel": {"expression": "device.allowMultipleAllocations"}}],
                "capacity": {"requests": {"kubeacc.io/memory": "4G"}},
            },
        }
        docs = [
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": "n1-kubeacc.io-0"},
                "spec": {
                    "driver": "kubeacc.io",
                    "nodeName": "n1",
                    "pool": {"name": "n1", "generation": 1, "resourceSliceCount": 1},
                    "devices": devices,
                },
            },
            *device_classes(),
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceClaim",
                "metadata": {"name": "infer", "namespace": "default"},
                "spec": {"devices": {"requests": [share]}},
            },
        ]
        (out / "all.yaml").write_text(yaml.safe_dump_all(docs))
        return out

    known = kubeacc("plan", str(folder("auto")), "-o", "json", home=tmp_path)
    assert known.returncode == 0, known.stdout + known.stderr
    assert "hints" not in json.loads(known.stdout)[0]
    off = folder("off")
    unknown = kubeacc("plan", str(off), "-o", "json", home=tmp_path)
    assert unknown.returncode == 1
    (placement,) = json.loads(unknown.stdout)
    (hint,) = placement["hints"]
    assert hint.startswith("2 GPUs on n1 have unknown memory") and "NVML not found" in hint
    table = kubeacc("plan", str(off), home=tmp_path)
    assert "2 GPUs on n1 have unknown memory" in table.stdout


def test_plan_follows_the_kubernetes_version_asked_for(tmp_path: Path) -> None:
    """An ``All`` claim under ``distinctAttribute`` over devices of index 0, 1, 0: kube-scheduler
    1.36 allocates it (one remembered value per request), 1.37 refuses it; the default is the
    newest; an unknown release is a clear error."""
    devs = [gpu(f"gpu-{i}") for i in range(3)]
    for d, i in zip(devs, (0, 1, 0), strict=True):
        d["attributes"]["index"] = {"int": i}
    every = {
        "name": "all",
        "exactly": {"deviceClassName": "gpu.kubeacc.io", "allocationMode": "All"},
    }
    docs = [
        slice_("a", devs),
        device_class(),
        claim(every, constraints=[{"distinctAttribute": "kubeacc.io/index"}]),
    ]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    ok = {}
    for args in (["--kubernetes-version", "v1.36.3"], ["--kubernetes-version", "1.37"], []):
        res = CliRunner().invoke(app, [str(tmp_path), "-o", "json", *args])
        ok[tuple(args)] = json.loads(res.stdout)[0]["allocated"]
    assert list(ok.values()) == [True, False, False]
    res = CliRunner().invoke(app, [str(tmp_path), "--kubernetes-version", "1.35"])
    assert res.exit_code != 0 and "not a release the engine follows" in res.output


def test_plan_follows_the_feature_gates_asked_for(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Three devices on one counter set in groups x, y, x and a claim for two: with
    DRADeviceCompatibilityGroups off (the default) the pool is ignored; on, the two x devices
    go together; a gate the engine does not follow, or one the release lacks, is an error."""
    counters = slice_(
        "a",
        [],
        name="a-counters",
        count=2,
        sharedCounters=[{"name": "cs", "counters": {"mem": {"value": "160Gi"}}}],
    )
    del counters["spec"]["devices"]
    devs = [
        gpu(
            f"gpu-{i}",
            consumesCounters=[
                {
                    "counterSet": "cs",
                    "counters": {"mem": {"value": "40Gi"}},
                    "compatibilityGroups": [g],
                }
            ],
        )
        for i, g in enumerate("xyx")
    ]
    docs = [counters, slice_("a", devs, name="a-devices", count=2), device_class()]
    docs.append(claim(exactly(count=2)))
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)

    def run(*args: str) -> list[str] | None:
        res = CliRunner().invoke(app, [str(tmp_path), "-o", "json", *args])
        out = json.loads(res.stdout)[0]
        if not out["allocated"]:
            return None
        return [r["device"] for r in out["allocation"]["devices"]["results"]]

    on = "DRADeviceCompatibilityGroups=true"
    assert run() is None
    assert run("--feature-gates", "DRADeviceCompatibilityGroups=false") is None
    assert run("--feature-gates", on) == ["gpu-0", "gpu-2"]
    monkeypatch.setenv("KUBEACC_PLAN_FEATURE_GATES", on)
    assert run() == ["gpu-0", "gpu-2"]
    monkeypatch.delenv("KUBEACC_PLAN_FEATURE_GATES")
    for args, why in (
        (["--feature-gates", "DRAFancy=true"], "not one the engine follows"),
        (["--feature-gates", "DRADeviceCompatibilityGroups"], "NAME=true or NAME=false"),
        (["--kubernetes-version", "1.36", "--feature-gates", on], "does not exist in Kubernetes"),
    ):
        res = CliRunner().invoke(app, [str(tmp_path), *args])
        assert res.exit_code != 0 and why in res.output, res.output


def test_plan_treats_devices_a_taint_rule_selects_as_tainted(tmp_path: Path) -> None:
    s = slice_("a", node_gpus(3))
    first = s["spec"]["devices"][0]["name"]
    rule = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceTaintRule",
        "metadata": {"name": "drain-first"},
        "spec": {
            "deviceSelector": {"driver": s["spec"]["driver"], "device": first},
            "taint": {"key": "drain", "effect": "NoSchedule"},
        },
    }
    docs = [s, device_class(), rule, claim(exactly(count=2), name="two"), claim(exactly(count=1))]
    (tmp_path / "all.yaml").write_text(yaml.safe_dump_all(docs))
    app = typer.Typer()
    app.command()(plan)
    res = CliRunner().invoke(app, [str(tmp_path), "-o", "json"])
    out = json.loads(res.stdout)
    assert out[0]["allocated"], out[0]
    picked = [r["device"] for r in out[0]["allocation"]["devices"]["results"]]
    assert first not in picked
    # the third device left is the tainted one
    assert not out[1]["allocated"] and res.exit_code == 1
