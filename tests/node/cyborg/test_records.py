"""The Cyborg kind's claim records and device profile names (kubeacc.node.cyborg.records)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from kubeacc.node.cyborg.records import (
    PREPARED,
    Arq,
    ClaimRecord,
    Records,
    is_own_profile,
    profile_name,
)

RP = "fa5048d9-8ad6-3d22-9fb7-489232d53cdc"


def test_profile_names_are_cyborgs_form_and_the_nodes_own() -> None:
    name = profile_name("gpu-1.rack-2.example.com", RP)
    assert re.fullmatch(r"[a-zA-Z0-9_-]+", name)  # Cyborg refuses anything else
    assert is_own_profile(name, "gpu-1.rack-2.example.com")
    assert not is_own_profile(name, "gpu-1")
    assert not is_own_profile(profile_name("gpu-1", RP), "gpu-1.rack-2.example.com")
    assert not is_own_profile("kubeacc-gpu-1-fa5048d9-extra", "gpu-1")


def test_records_round_trip_and_a_torn_one_is_skipped(tmp_path: Path) -> None:
    records = Records(tmp_path)
    rec = ClaimRecord(uid="u1", namespace="ns", name="c", devices={"cyborg-fa5048d9-0": RP})
    records.write(rec)
    rec.arqs.append(Arq("a1", RP, "cyborg-fa5048d9-0"))
    rec.phase = PREPARED
    records.write(rec)
    assert records.read("u1") == rec
    (tmp_path / "cyborg" / "u2.json").write_text('{"uid": "u2", "namesp')
    assert [r.uid for r in records.all()] == ["u1"]
    records.remove("u1")
    records.remove("u1")  # twice: already gone is fine
    assert records.read("u1") is None


@pytest.mark.parametrize("uid", ["", "../x", ".hidden", "a/b"])
def test_a_uid_that_is_not_one_names_no_file(tmp_path: Path, uid: str) -> None:
    with pytest.raises(ValueError, match="not a claim UID"):
        Records(tmp_path).read(uid)
