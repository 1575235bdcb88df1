"""AcceleratorPolicies choosing memory-shared devices: which policies count, what they select,
FPGAs only when named, and a failed read keeping the last selection."""

from __future__ import annotations

from typing import Any

from kubeacc.agent.dra.devices import slice_devices
from kubeacc.agent.dra.policyshare import PolicyShare, PolicyShares, policy_shares
from kubeacc.agent.dra.sharing import is_memory_shared


def policy(name: str, mode: str, **selector: list[str]) -> dict[str, Any]:
    return {"metadata": {"name": name}, "spec": {"selector": selector, "sharing": {"mode": mode}}}


def test_only_memory_sharing_modes_count() -> None:
    found = policy_shares(
        [
            policy("b-mps", "MPS", types=["gpu"]),
            policy("a-mem", "MemoryShared", vendors=["AMD"]),
            policy("sliced", "TimeSliced", types=["gpu"]),
            policy("whole", "Exclusive"),
            {"metadata": {"name": "broken"}, "spec": {"sharing": {"mode": "Nope"}}},
        ]
    )
    assert found == (
        PolicyShare("a-mem", vendors=frozenset({"AMD"})),
        PolicyShare("b-mps", types=frozenset({"gpu"})),
    )


def test_policies_select_by_type_vendor_and_model(make_inventory: Any) -> None:
    def chosen(profile: str, *policies: dict[str, Any]) -> set[str]:
        shares = policy_shares(policies)
        return {d.name for d in make_inventory(profile).devices if is_memory_shared(d, shares)}

    amd = make_inventory("amd-gpu")
    mi210 = {d.name for d in amd.devices if d.model == "Instinct MI210"}
    assert len(mi210) == 4
    assert chosen("amd-gpu", policy("p", "MemoryShared", vendors=["AMD"])) == mi210
    assert chosen("amd-gpu", policy("p", "MemoryShared", models=["Instinct MI210"])) == mi210
    assert chosen("amd-gpu", policy("p", "MemoryShared", vendors=["NVIDIA"])) == set()
    xpus = {d.name for d in make_inventory("kunlun-xpu").devices if d.type.value == "xpu"}
    assert chosen("kunlun-xpu", policy("p", "MemoryShared", types=["xpu"])) == xpus
    assert chosen("kunlun-xpu", policy("p", "MemoryShared")) == xpus  # no NIC: no memory


def test_fpgas_only_when_the_policy_names_the_type(make_inventory: Any) -> None:
    inv = make_inventory("large-mixed")
    fpga = next(d for d in inv.devices if d.type.value == "fpga")
    fpga.memory_bytes = 8 << 30  # an FPGA card with on-board memory discovery knows of
    anything = policy_shares([policy("any", "MemoryShared")])
    named = policy_shares([policy("f", "MemoryShared", types=["fpga"])])
    assert not is_memory_shared(fpga, anything)
    assert is_memory_shared(fpga, named)
    entry = {d["name"]: d for d in slice_devices(inv, named)}[fpga.name]
    assert entry["allowMultipleAllocations"] is True


def test_a_failed_read_keeps_the_last_policies() -> None:
    answers: list[Any] = [[policy("m", "MemoryShared")], RuntimeError("API server away"), []]

    def listing() -> list[dict[str, Any]]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    shares = PolicyShares(listing)
    first = shares.refresh()
    assert [p.policy for p in first] == ["m"]
    assert shares.refresh() == first
    assert shares.refresh() == ()
