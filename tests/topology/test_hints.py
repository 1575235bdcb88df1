"""Device hint generation and mask helpers (kubelet device manager rules)."""

from __future__ import annotations

import pytest

from kubeacc.topology.hints import (
    ContainerRequest,
    TopologyHint,
    device_hints,
    is_narrower,
    iterate_masks,
    mask_of,
    pod_requests,
)

M = mask_of
T, F = True, False

# Two NUMA nodes, two devices each.
DEVS2 = {"a": [0], "b": [0], "c": [1], "d": [1]}


def test_iteration_order_is_by_width_then_combination() -> None:
    expected = [M(0), M(1), M(2), M(0, 1), M(0, 2), M(1, 2), M(0, 1, 2)]
    assert list(iterate_masks([0, 1, 2])) == expected


@pytest.mark.parametrize(
    ("a", "b", "narrower"),
    [
        (M(0), M(0, 1), True),
        (M(0, 1), M(0), False),
        (M(0, 1), M(0, 2), True),  # same width: numerically smaller wins
        (M(1, 2), M(0, 3), True),
    ],
)
def test_narrower(a: int, b: int, narrower: bool) -> None:
    assert is_narrower(a, b) is narrower


@pytest.mark.parametrize(
    ("name", "available", "count", "reusable", "expected"),
    [
        (
            "one device fits each node",
            "abcd",
            1,
            "",
            [TopologyHint(M(0), T), TopologyHint(M(1), T), TopologyHint(M(0, 1), F)],
        ),
        (
            "two devices fit each node",
            "abcd",
            2,
            "",
            [TopologyHint(M(0), T), TopologyHint(M(1), T), TopologyHint(M(0, 1), F)],
        ),
        ("three need both nodes: preferred", "abcd", 3, "", [TopologyHint(M(0, 1), T)]),
        (
            "busy node 0: node 1 only",
            "cd",
            2,
            "",
            [TopologyHint(M(1), T), TopologyHint(M(0, 1), F)],
        ),
        ("reused device on busy node: nothing preferred", "cd", 2, "b", [TopologyHint(M(0, 1), F)]),
        ("min width counts all devices, not free ones", "bd", 2, "", [TopologyHint(M(0, 1), F)]),
        (
            "reusable device pins the mask",
            "abcd",
            1,
            "c",
            [TopologyHint(M(1), T), TopologyHint(M(0, 1), F)],
        ),
        ("not enough devices: empty list", "ab", 3, "", []),
    ],
)
def test_device_hints(
    name: str, available: str, count: int, reusable: str, expected: list[TopologyHint]
) -> None:
    got = device_hints([0, 1], DEVS2, list(available), count, list(reusable))
    assert got == expected, name


def test_no_numa_information_means_no_preference() -> None:
    assert device_hints([0, 1], {"a": [], "b": []}, ["a", "b"], 1) is None


def test_devices_without_numa_do_not_count_in_masks() -> None:
    devs = {"a": [0], "x": []}
    # available has two devices, but only one is in any mask
    assert device_hints([0, 1], devs, ["a", "x"], 2) == []


def test_pod_requests_sum_apps_and_take_init_peak() -> None:
    cs = [
        ContainerRequest("init", {"gpu": 3}, init=True),
        ContainerRequest("side", {"gpu": 1}, init=True, restartable=True),
        ContainerRequest("init2", {"gpu": 2}, init=True),
        ContainerRequest("a", {"gpu": 1}),
        ContainerRequest("b", {"gpu": 1, "nic": 1}),
    ]
    # apps 2 + sidecar 1 = 3; init peak max(3, 1+2) = 3
    assert pod_requests(cs) == {"gpu": 3, "nic": 1}
    cs[0] = ContainerRequest("init", {"gpu": 5}, init=True)
    assert pod_requests(cs)["gpu"] == 5
