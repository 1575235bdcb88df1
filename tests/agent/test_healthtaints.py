"""Health taints: faults to effects, the hold, level faults, flapping, partitions and VFs."""

from __future__ import annotations

import pytest

from kubeacc.agent.healthtaints import (
    Effect,
    HealthTaints,
    effect_of,
    reason_of,
    with_health_taints,
)
from kubeacc.agent.telemetry.faults import DeviceFault
from kubeacc.agent.telemetry.series import Reading
from kubeacc.contracts.names import HEALTH_TAINT
from kubeacc.crds.api import EventClass

ECC = EventClass.ECC_UNCORRECTABLE


def xid(device: str, code: int) -> DeviceFault:
    return DeviceFault(device, EventClass.XID, code)


@pytest.mark.parametrize(
    ("fault", "effect", "reason"),
    [
        (xid("gpu-0", 79), Effect.NO_EXECUTE, "xid-79"),
        (xid("gpu-0", 48), Effect.NO_EXECUTE, "xid-48"),
        (xid("gpu-0", 94), Effect.NO_SCHEDULE, "xid-94"),
        (xid("gpu-0", 92), Effect.NONE, "xid-92"),
        (xid("gpu-0", 13), None, "xid-13"),  # the application's own fault
        (DeviceFault("gpu-0", ECC), Effect.NO_EXECUTE, "ecc-uncorrectable"),
        (DeviceFault("gpu-0", EventClass.FALLEN_OFF_BUS), Effect.NO_EXECUTE, "fallen-off-bus"),
        (DeviceFault("fpga-0", EventClass.FPGA_PORT_ERROR), Effect.NO_EXECUTE, "fpga-port-error"),
        (DeviceFault("nic-0", EventClass.LINK_DOWN), Effect.NO_SCHEDULE, "link-down"),
    ],
)
def test_each_fault_class_has_its_effect(
    fault: DeviceFault, effect: Effect | None, reason: str
) -> None:
    assert effect_of(fault) is effect
    assert reason_of(fault) == reason


def test_a_taint_is_held_then_lifted() -> None:
    h = HealthTaints(hold=10)
    [added] = h.update([xid("gpu-1", 79)], [], now=100)
    assert (added.step, added.effect, added.damped) == ("added", Effect.NO_EXECUTE, False)
    assert h.taints() == {"gpu-1": {"key": HEALTH_TAINT, "value": "xid-79", "effect": "NoExecute"}}
    assert h.update([], [], now=109) == []
    [lifted] = h.update([], [], now=110)
    assert (lifted.device, lifted.step) == ("gpu-1", "lifted")
    assert h.taints() == {}


def test_a_new_fault_extends_the_hold_and_a_stronger_one_raises_the_effect() -> None:
    h = HealthTaints(hold=10)
    h.update([xid("gpu-1", 92)], [], now=0)
    assert h.taints()["gpu-1"]["effect"] == "None"
    assert h.update([xid("gpu-1", 63)], [], now=8) == []  # same effect: held longer
    assert h.update([], [], now=12) == []
    [raised] = h.update([xid("gpu-1", 79)], [], now=15)
    assert (raised.step, raised.effect) == ("raised", Effect.NO_EXECUTE)
    assert h.taints()["gpu-1"] == {"key": HEALTH_TAINT, "value": "xid-79", "effect": "NoExecute"}
    assert h.update([xid("gpu-1", 92)], [], now=16) == []  # weaker: the effect stays
    assert h.taints()["gpu-1"]["effect"] == "NoExecute"


def test_a_level_fault_keeps_the_taint_until_the_device_is_back() -> None:
    h = HealthTaints(hold=5)
    down = [Reading("link_up", "nic-0", 0, ("eth0",))]
    h.update([DeviceFault("nic-0", EventClass.LINK_DOWN, detail="eth0")], down, now=0)
    assert h.update([], down, now=60) == []
    assert "nic-0" in h.taints()
    [lifted] = h.update([], [Reading("link_up", "nic-0", 1, ("eth0",))], now=61)
    assert lifted.step == "lifted"


def test_flapping_doubles_the_hold_up_to_its_cap_and_a_quiet_spell_resets_it() -> None:
    h = HealthTaints(hold=10, flap_window=100, max_hold=40)
    holds = []
    now = 0.0
    for _ in range(4):
        [added] = h.update([xid("gpu-2", 79)], [], now=now)
        holds.append((added.hold, added.damped))
        now += added.hold
        assert h.update([], [], now=now)[0].step == "lifted"
        now += 1
    assert holds == [(10, False), (20, True), (40, True), (40, True)]
    [added] = h.update([xid("gpu-2", 79)], [], now=now + 100)
    assert (added.hold, added.damped) == (10, False)


def test_devices_gone_are_forgotten() -> None:
    h = HealthTaints(hold=10)
    h.update([xid("gpu-1", 79), xid("gpu-2", 79)], [], now=0)
    h.forget(["gpu-2"])
    assert list(h.taints()) == ["gpu-2"]


def test_a_hold_must_be_positive() -> None:
    with pytest.raises(ValueError, match="positive"):
        HealthTaints(hold=0)


def test_partitions_and_vfs_carry_their_device_taint() -> None:
    entries = [
        {"name": "gpu-1"},
        {"name": "gpu-1-mig-1g10gb-0", "taints": [{"key": "other", "effect": "NoSchedule"}]},
        {"name": "gpu-10"},
        {"name": "nic-0-vf1"},
        {"name": "nic-0"},
    ]
    taint = {"key": HEALTH_TAINT, "value": "xid-79", "effect": "NoExecute"}
    nic = {"key": HEALTH_TAINT, "value": "link-down", "effect": "NoSchedule"}
    out = with_health_taints(entries, {"gpu-1": taint, "nic-0": nic})
    assert [e.get("taints") for e in out] == [
        [taint],
        [{"key": "other", "effect": "NoSchedule"}, taint],
        None,
        [nic],
        [nic],
    ]
    assert with_health_taints(entries, {}) is entries
