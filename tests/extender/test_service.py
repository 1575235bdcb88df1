"""Filter and prioritize on the upstream wire format; bind's decide-and-reserve step.

(Binding itself talks to the API server: tests/extender/test_cluster.py.)"""

from __future__ import annotations

import json
from typing import Any

import pytest

from kubeacc.contracts.wants import MEMORY, pod_want
from kubeacc.extender.server import ExtenderServer
from kubeacc.extender.service import BindError, Extender
from tests.extender.helpers import pod, small_gpu, state_with

A = "0000:01:00.0"


def extender() -> Extender:
    return Extender(state_with({"big": [small_gpu(A, 20000)], "small": [small_gpu(A, 5000)]}))


def test_filter_answers_node_names_and_reasons() -> None:
    ext = extender()
    args = {"Pod": pod("p", {MEMORY: "8000"}), "NodeNames": ["big", "small", "cpu-only"]}
    out = ext.filter(args)
    assert out["NodeNames"] == ["big"]
    assert out["FailedNodes"] == {
        "small": "no GPU with 8000 MiB free (most free on one GPU: 5000 MiB)"
    }
    assert out["FailedAndUnresolvableNodes"] == {"cpu-only": "no kubeacc GPUs on this node"}
    assert out["Error"] == ""


def test_filter_with_full_node_objects_returns_nodes() -> None:
    ext = extender()
    nodes = {"items": [{"metadata": {"name": "big"}}, {"metadata": {"name": "small"}}]}
    out = ext.filter({"Pod": pod("p", {MEMORY: "8000"}), "Nodes": nodes, "NodeNames": None})
    assert [n["metadata"]["name"] for n in out["Nodes"]["items"]] == ["big"]


def test_an_invalid_pod_is_unresolvable_everywhere() -> None:
    ext = extender()
    out = ext.filter({"Pod": pod("p", {MEMORY: "1", "kubeacc.io/gpu": "1"}), "NodeNames": ["big"]})
    assert (
        out["NodeNames"] == []
        and "whole GPUs and a share" in out["FailedAndUnresolvableNodes"]["big"]
    )


def test_prioritize_scores_every_node() -> None:
    ext = extender()
    args = {"Pod": pod("p", {MEMORY: "4000"}), "NodeNames": ["big", "small", "cpu-only"]}
    ext.filter(args)
    scores = {h["Host"]: h["Score"] for h in ext.prioritize(args)}
    assert scores["small"] > scores["big"] > 0 and scores["cpu-only"] == 0


def test_the_second_of_two_racing_pods_is_refused_with_the_reason() -> None:
    ext = extender()
    first, second = pod("p1", {MEMORY: "3000"}), pod("p2", {MEMORY: "3000"})
    # both passed filter on "small" (5000 MiB); bind decides against the state of the moment
    assert ext.filter({"Pod": second, "NodeNames": ["small"]})["NodeNames"] == ["small"]
    ext.decide(first, pod_want(first), "small")
    with pytest.raises(
        BindError, match=r"no GPU with 3000 MiB free .*2000 MiB.*taken since filter"
    ):
        ext.decide(second, pod_want(second), "small")


def test_http_verbs_and_probes() -> None:
    import urllib.error
    import urllib.request

    ext = extender()
    leading = [False]
    server = ExtenderServer(ext, "127.0.0.1", 0, serving=lambda: leading[0])
    server.start()
    base = f"http://127.0.0.1:{server.port}"
    body = json.dumps({"Pod": pod("p", {MEMORY: "100"}), "NodeNames": ["big"]}).encode()

    def post(path: str, data: bytes) -> tuple[int, Any]:
        req = urllib.request.Request(base + path, data=data, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=10) as r:
                return r.status, json.loads(r.read())
        except urllib.error.HTTPError as err:
            return err.code, json.loads(err.read())

    try:
        code, out = post("/filter", body)
        assert code == 503 and "does not lead" in str(out["Error"])
        leading[0] = True
        code, out = post("/filter", body)
        assert code == 200 and out["NodeNames"] == ["big"]
        code, out = post("/prioritize", body)
        assert code == 200 and out == [{"Host": "big", "Score": 1}]
        code, out = post("/filter", b"[1, 2")
        assert code == 400 and "bad request" in str(out["Error"])
        code, out = post(
            "/bind", json.dumps({"PodName": "p", "PodNamespace": "d", "Node": "big"}).encode()
        )
        assert code == 200 and out == {"Error": "this extender does not bind"}
        with urllib.request.urlopen(base + "/healthz", timeout=10) as r:
            assert r.status == 200
    finally:
        server.stop()
