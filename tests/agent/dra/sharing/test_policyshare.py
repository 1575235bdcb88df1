"""AcceleratorPolicies choosing memory-shared devices: which policies count, what they select,
FPGAs only when named, and a failed read keeping the last selection."""

from __future__ import annotations

from typing import Any

from kubeacc.agent.dra.devices import slice_devices
from kubeacc.agent.dra.sharing.limits import is_memory_shared
from kubeacc.agent.dra.sharing.policyshare import (
    MigFilter,
    PolicyShare,
    PolicyShares,
    mig_filters,
    policy_migs,
    policy_shares,
)


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


def mig_policy(name: str, profiles: list[str], whole: bool | None = None, **sel: Any) -> Any:
    sharing: dict[str, Any] = {"mode": "MIG", "migProfiles": profiles}
    if whole is not None:
        sharing["migWholeGpu"] = whole
    return {
        "metadata": {"name": name, "uid": f"uid-{name}"},
        "spec": {"selector": sel, "sharing": sharing},
    }


def test_mig_policies_filter_the_mig_gpus_they_select(make_inventory: Any) -> None:
    inv = make_inventory("mig-pair")
    h100, a100 = sorted(d.name for d in inv.devices if d.type.value == "gpu")
    model = {d.name: d.model for d in inv.devices}
    migs = policy_migs(
        [
            mig_policy("a", ["3g.40gb"], types=["gpu"], models=[model[h100]]),
            mig_policy("b", ["1g.10gb"], False, types=["gpu"], models=[model[h100]]),
            mig_policy("c", ["7g.80gb"], False, types=["gpu"], models=[model[a100]]),
            policy("not-mig", "MPS", types=["gpu"]),
        ]
    )
    assert [m.policy for m in migs] == ["a", "b", "c"]
    assert policy_shares([mig_policy("a", ["3g.40gb"], types=["gpu"])]) == ()
    offered = {h100: {"3g.40gb", "1g.10gb"}, a100: {"7g.80gb"}}
    filters, problems = mig_filters(migs, inv.devices, offered)
    # the union of the policies on the H100; the whole GPU when any of them wants it
    assert filters[h100] == MigFilter(frozenset({"3g.40gb", "1g.10gb"}), True)
    assert filters[a100] == MigFilter(frozenset({"7g.80gb"}), False)
    assert problems == []


def test_a_mig_policy_on_a_gpu_not_in_mig_mode_says_why(make_inventory: Any) -> None:
    inv = make_inventory("mig-pair")
    h100, a100 = sorted(d.name for d in inv.devices if d.type.value == "gpu")
    migs = policy_migs([mig_policy("p", ["1g.5gb"], types=["gpu"])])
    filters, problems = mig_filters(migs, inv.devices, {a100: {"1g.10gb", "7g.80gb"}})
    assert set(filters) == {a100}  # the H100 (as if not in MIG mode) gets no filter
    # one message for the policy, counting and naming both GPUs
    ((policy, message),) = problems
    assert policy.policy == "p"
    assert message.startswith("2 of the 2 GPUs it selects here: "), message
    assert f"1 not in MIG mode (GPU {h100} (" in message
    assert f"1 offer none of the MIG profiles 1g.5gb (GPU {a100} (" in message
    assert "offers 1g.10gb, 7g.80gb)" in message


def test_a_mig_policy_over_many_gpus_not_in_mig_mode_warns_once(make_inventory: Any) -> None:
    inv = make_inventory("dgx-h100")
    gpus = sorted(d.name for d in inv.devices if d.type.value == "gpu")
    assert len(gpus) == 8
    one = policy_migs([mig_policy("p", ["3g.40gb"], types=["gpu"])])
    two = policy_migs([mig_policy("q", ["1g.10gb"], types=["gpu"])])
    # none of the 8 in MIG mode: one problem per policy, not one per GPU
    filters, problems = mig_filters(one + two, inv.devices, {})
    assert filters == {}
    assert [p.policy for p, _ in problems] == ["p", "q"]
    for _, message in problems:
        assert message.startswith("8 of the 8 GPUs it selects here: 8 not in MIG mode (")
        assert message.count("GPU gpu-") == 4 and "and 4 more" in message


def test_a_failed_read_keeps_the_mig_policies() -> None:
    answers: list[Any] = [[mig_policy("p", ["3g.40gb"], types=["gpu"])], RuntimeError("away")]

    def listing() -> list[dict[str, Any]]:
        answer = answers.pop(0)
        if isinstance(answer, Exception):
            raise answer
        return list(answer)

    shares = PolicyShares(listing)
    shares.refresh()
    assert [m.profiles for m in shares.migs] == [frozenset({"3g.40gb"})]
    shares.refresh()
    assert [m.policy for m in shares.migs] == ["p"]
