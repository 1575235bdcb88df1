"""The node agent's view of the CRDs: Structs made from the generated schemas, no pydantic."""

from __future__ import annotations

import subprocess
import sys
from typing import Any

import pytest

from kubeacc.crds import schemafile
from kubeacc.crds.schemastructs import SchemaViolation, struct_type, to_api, validate
from kubeacc.crds.types import AcceleratorPolicySpec, FaultReport


def test_the_shipped_schemas_are_what_the_types_generate() -> None:
    assert schemafile.PATH.read_text() == schemafile.generate(), (
        "kubeacc/crds/schemas.json is stale: run python -m kubeacc.crds.schemafile"
    )


@pytest.mark.parametrize(
    "spec",
    [
        {},
        {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MIG", "migProfiles": ["3g.40gb"]}},
        {"sharing": {"mode": "MemoryShared", "maxConsumers": 4, "memoryPerConsumerBytes": 1}},
        {
            "selector": {"types": ["fpga"], "vendors": ["0x8086"]},
            "allowedBitstreams": [{"name": "aes/v1.gbs", "sha256": "ab" * 32}],
            "remediation": {"rules": [{"event": "Xid", "xids": [48], "action": "DrainAndReset"}]},
        },
    ],
)
def test_a_valid_policy_reads_as_the_pydantic_type_does(spec: dict[str, Any]) -> None:
    ours = validate("AcceleratorPolicy", "spec", spec)
    theirs = AcceleratorPolicySpec.model_validate(spec)
    assert list(ours.selector.types) == [t.value for t in theirs.selector.types]
    assert ours.selector.vendors == theirs.selector.vendors
    assert ours.sharing.mode == theirs.sharing.mode
    assert ours.sharing.max_consumers == theirs.sharing.max_consumers
    assert ours.sharing.memory_per_consumer_bytes == theirs.sharing.memory_per_consumer_bytes
    assert ours.sharing.mig_profiles == theirs.sharing.mig_profiles
    assert ours.sharing.mig_whole_gpu == theirs.sharing.mig_whole_gpu
    assert [b.sha256 for b in ours.allowed_bitstreams] == [
        b.sha256 for b in theirs.allowed_bitstreams
    ]
    assert ours.on_unhealthy == theirs.on_unhealthy


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        ({"sharing": {"maxConsumers": 65}}, "spec.sharing.maxConsumers: Expected `int` <= 64"),
        ({"sharing": {"mode": "Spatial"}}, "spec.sharing.mode: Invalid enum value 'Spatial'"),
        ({"selector": {"types": ["tpu"]}}, "spec.selector.types[0]: Invalid enum value 'tpu'"),
        (
            {"sharing": {"migProfiles": ["big"]}},
            "migProfiles[0]: Expected `str` match",
        ),
        ({"remediation": {"rules": []}}, "spec.remediation.rules: Expected `array` of length >= 1"),
        (
            {"allowedBitstreams": [{"name": "../x", "sha256": "ab" * 32}]},
            "allowedBitstreams[0].name",
        ),
        ({"sharing": 3}, "spec.sharing: Expected `object`, got `int`"),
    ],
)
def test_an_invalid_policy_is_a_clear_error_the_pydantic_type_also_refuses(
    spec: dict[str, Any], message: str
) -> None:
    with pytest.raises(SchemaViolation) as caught:
        validate("AcceleratorPolicy", "spec", spec)
    assert str(caught.value).startswith("AcceleratorPolicy ")
    assert message in str(caught.value)
    with pytest.raises(ValueError):  # the same schema: the pydantic type refuses it too
        AcceleratorPolicySpec.model_validate(spec)


def test_a_fault_report_is_written_as_the_pydantic_type_writes_it() -> None:
    report = {"event": "Xid", "xid": 79, "detail": "fell off", "time": "2026-01-01T00:00:00Z"}
    assert to_api(validate("Accelerator", "status.lastFault", report)) == (
        FaultReport.model_validate(report).to_api()
    )
    with pytest.raises(SchemaViolation, match=r"status.lastFault.xid: Expected `int` <= 999"):
        validate("Accelerator", "status.lastFault", {**report, "xid": 1000})


def test_every_kind_builds_and_an_unknown_keyword_is_refused(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    for kind in ("Accelerator", "AcceleratorPolicy", "AcceleratorOperation"):
        for part in ("spec", "status"):
            struct_type(kind, part)
    schema = {"Odd": {"properties": {"spec": {"type": "string", "oneOf": []}}}}
    monkeypatch.setattr("kubeacc.crds.schemastructs.load", lambda: schema)
    with pytest.raises(TypeError, match=r"Odd.spec: schema keywords \['oneOf'\]"):
        struct_type("Odd", "spec")


def test_reading_policies_needs_no_pydantic() -> None:
    code = (
        "import sys\n"
        "from kubeacc.agent.dra.sharing.policyshare import policy_shares\n"
        "from kubeacc.crds.opaque import parse_config\n"
        "from kubeacc.agent.telemetry.report import report_of\n"
        "pols = [{'metadata': {'name': 'p'}, 'spec': {'sharing': {'mode': 'MPS'},"
        " 'selector': {'types': ['gpu']}}}, {'metadata': {'name': 'bad'},"
        " 'spec': {'sharing': {'mode': 'Nope'}}}]\n"
        "assert [p.policy for p in policy_shares(pols)] == ['p']\n"
        "parse_config({'apiVersion': 'kubeacc.io/v1alpha1', 'kind': 'GpuConfig'})\n"
        "print(sorted(m for m in sys.modules if m.startswith('pydantic')))\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[]"
    assert "AcceleratorPolicy bad ignored: AcceleratorPolicy spec.sharing.mode" in done.stderr
