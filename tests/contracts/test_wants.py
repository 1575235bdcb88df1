from __future__ import annotations

import pytest

from kubeacc.contracts.names import MODELS_ANNOTATION
from kubeacc.contracts.wants import (
    CORES,
    GPU,
    MEMORY,
    Assigned,
    ContainerWant,
    Decision,
    WantError,
    decision_of,
    pod_want,
)
from tests.extender.helpers import pod


def test_shares_whole_and_models_are_read_per_container() -> None:
    want = pod_want(
        pod(
            "p",
            {MEMORY: "4096", CORES: "30"},
            {"kubeacc.io/gpu-h100-80gb-hbm3": "2"},
            {"cpu": "1"},
            annotations={MODELS_ANNOTATION: "H100-80gb-hbm3, l4"},
        )
    )
    assert want.containers == (
        ContainerWant("c0", memory=4096, cores=30),
        ContainerWant("c1", whole=2, model="h100-80gb-hbm3"),
    )
    assert want.prefer.names == ("H100-80gb-hbm3", "l4")
    assert (want.rank("h100-80gb-hbm3"), want.rank("l4"), want.rank("a100")) == (0, 1, None)
    assert want.whole == 2 and want.largest_share == 4096


def test_requests_count_when_limits_do_not_say() -> None:
    p = pod("p")
    p["spec"]["containers"] = [{"name": "a", "resources": {"requests": {GPU: "1"}}}]
    assert pod_want(p).containers == (ContainerWant("a", whole=1),)


@pytest.mark.parametrize(
    ("limits", "fragment"),
    [
        ({GPU: "1", MEMORY: "100"}, "whole GPUs and a share"),
        ({CORES: "150"}, "at most 100"),
        ({MEMORY: "1.5"}, "whole number"),
        ({MEMORY: "lots"}, "not a quantity"),
        ({GPU: "1", "kubeacc.io/gpu-l4": "1"}, "both"),
    ],
)
def test_nonsense_is_refused_with_the_reason(limits: dict[str, str], fragment: str) -> None:
    with pytest.raises(WantError, match=fragment):
        pod_want(pod("p", limits))


def test_init_containers_with_gpus_are_refused() -> None:
    p = pod("p", {MEMORY: "10"})
    p["spec"]["initContainers"] = [{"name": "i", "resources": {"limits": {GPU: "1"}}}]
    with pytest.raises(WantError, match="init container i"):
        pod_want(p)


def test_a_pod_without_gpu_resources_wants_nothing() -> None:
    assert pod_want(pod("p", {"cpu": "2"})).empty


def test_decision_round_trips_and_bad_annotations_are_ignored() -> None:
    d = Decision(
        "node-a",
        (
            Assigned("c0", ("0000:01:00.0",), memory=512, cores=20),
            Assigned("c1", ("0000:1b:00.0", "0000:1d:00.0"), whole=True),
        ),
    )
    assert Decision.from_json(d.to_json()) == d
    assert decision_of(pod("p", decision=d)) == d
    assert decision_of(pod("p", annotations={"kubeacc.io/devices": "{not json"})) is None
    assert d.container("c1") == d.containers[1] and d.container("x") is None
