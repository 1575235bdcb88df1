"""``--units-table``: a bad unit table is one line and exit 2, before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.cli.clirun import assert_one_line_error, kubeacc


@pytest.mark.parametrize(
    "command",
    [
        ["extender"],
        ["agent", "--node-name=n", "--host-root=/"],
        ["plan", "."],
        ["claim", "c", "--prefer", "H100"],
    ],
)
def test_a_bad_unit_table_is_refused(tmp_path: Path, command: list[str]) -> None:
    bad = tmp_path / "units.yaml"
    bad.write_text("models: {H100: fast}\n")
    result = kubeacc(*command, f"--units-table={bad}", home=tmp_path)
    assert_one_line_error(result, 2, f"{bad}: models.H100: units must be a whole number")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--units", "100", "--count", "2"], "--count and --units ask the same thing two ways"),
        (["--units", "100", "--prefer", "H100,*"], "'*' has no units per device"),
    ],
)
def test_a_claim_asked_two_ways_is_one_line(tmp_path: Path, args: list[str], message: str) -> None:
    prefer = [] if "--prefer" in args else ["--prefer", "H100"]
    result = kubeacc("claim", "c", *prefer, *args, home=tmp_path)
    assert_one_line_error(result, 2, message)
