from __future__ import annotations

import pytest

from kubeacc.units.prefer import PreferenceError, parse_preference


def test_ranks_follow_the_list_and_names_match_by_tokens() -> None:
    p = parse_preference("H100, A100 ,KunLun R200")
    assert p.rank("h100-80gb-hbm3") == 0
    assert p.rank("NVIDIA A100-SXM4-40GB") == 1
    assert p.rank("kunlun-ai-accelerator-r200") == 2
    assert p.rank("l4") is None
    assert str(p) == "H100, A100, KunLun R200"


def test_a_star_takes_any_other_model_last() -> None:
    p = parse_preference("H100,*")
    assert p.rank("h100-pcie") == 0 and p.rank("l4") == 1
    assert parse_preference("").empty and parse_preference("").rank("l4") == 0


@pytest.mark.parametrize(
    ("text", "message"), [("*,H100", "must come last"), ("H100,,A100", "entry 2 .* names no model")]
)
def test_bad_lists(text: str, message: str) -> None:
    with pytest.raises(PreferenceError, match=message):
        parse_preference(text)


def test_a_huge_list_is_refused_at_once() -> None:
    import time

    text = ",".join(f"model-{i}" for i in range(20_000))
    start = time.monotonic()
    with pytest.raises(PreferenceError, match="at most"):
        parse_preference(text)
    with pytest.raises(PreferenceError, match="entries; at most 64"):
        parse_preference(",".join(["H100"] * 65))
    assert time.monotonic() - start < 0.05
    assert len(parse_preference(",".join(["H100"] * 64)).names) == 64
