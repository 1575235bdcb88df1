"""The quick reading of filter and prioritize bodies gives what the full reading gives."""

from __future__ import annotations

import http.client
import json
from typing import Any

import msgspec
import pytest

from kubeacc.contracts.wants import MEMORY
from kubeacc.extender.namelists import NameLists
from kubeacc.extender.server import (
    BadRequest,
    ExtenderServer,
    _decode_quick,
    _encoder,
    decode_args,
    decode_verb_args,
    encode_answer,
)
from kubeacc.extender.service import Extender
from tests.extender.helpers import pod, small_gpu, state_with

POD = pod("p", {MEMORY: "100"})
NODE = {"metadata": {"name": "n1", "labels": {"a": "b"}}, "status": {}}
DEEP: Any = "x"
for _ in range(40):
    DEEP = {"a": DEEP}

BODIES = [
    {"Pod": POD, "NodeNames": ["n1", "n2"], "Nodes": None},
    {"Pod": POD, "NodeNames": None, "Nodes": {"items": [NODE]}},
    {"Pod": POD},
    {"NodeNames": ["n1"]},
    {},
    {"Pod": None, "NodeNames": [], "Nodes": None},
    {"Pod": POD, "NodeNames": ["n1"], "Extra": [[[1]]]},  # unknown field: read fully
    {"Pod": POD, "NodeNames": "n1"},
    {"Pod": [1], "NodeNames": ["n1"]},
    {"Pod": {"metadata": {"annotations": {"a": 1}}}, "NodeNames": ["n1"]},
    {"Pod": DEEP, "NodeNames": ["n1"]},
    {"Pod": POD, "Nodes": {"items": [DEEP]}},
    {"Pod": POD, "Extra": DEEP},
]
RAW_BODIES = [
    b'{"Pod": {}, "NodeNames": ["a"], "NodeNames": ["b", "c"]}',  # the last one counts
    b'{"NodeNames": ["a", "b"] , "Pod" : {"spec": {}}}',
    b"[1, 2]",
    b"\x00\xff binary",
    b"[" * 100_000 + b"]" * 100_000,
    b'{"Pod": ' + b"[" * 100_000 + b"]" * 100_000 + b"}",
    b'{"NodeNames": ["a", 1]}',
    b'{"NodeNames": ["a"',
]


def _read(reader: Any, verb: str, raw: bytes) -> tuple[str, Any]:
    try:
        return "ok", reader(verb, raw)
    except BadRequest as err:
        return "400", str(err)


@pytest.mark.parametrize("verb", ["filter", "prioritize", "bind"])
@pytest.mark.parametrize("raw", [json.dumps(b).encode() for b in BODIES] + RAW_BODIES)
def test_the_quick_reading_answers_as_the_full_one(verb: str, raw: bytes) -> None:
    lists = NameLists()
    full = _read(decode_args, verb, raw)
    quick = _read(lambda v, r: decode_verb_args(v, r, lists), verb, raw)
    assert quick == full


@pytest.mark.parametrize("body", BODIES[:6])
def test_well_formed_bodies_take_the_quick_way(body: dict[str, Any]) -> None:
    assert _decode_quick("filter", json.dumps(body).encode(), NameLists()) is not None


def test_prioritize_takes_back_the_names_filter_answered() -> None:
    ext = Extender(state_with({f"n{i}": [small_gpu(f"0000:0{i}:00.0", 20000)] for i in range(3)}))
    lists = NameLists()
    body = {"Pod": POD, "NodeNames": ["n2", "nope", "n0", "n1"], "Nodes": None}
    answer = encode_answer(
        "filter", ext.filter(decode_verb_args("filter", _encoder.encode(body), lists)), lists
    )
    assert answer == _encoder.encode(ext.filter(body))  # byte for byte the plain encoding
    kept = msgspec.json.decode(answer)["NodeNames"]
    assert kept == ["n2", "n0", "n1"]
    # the scheduler sends them back, as Go encodes them
    prio = _encoder.encode({"Pod": POD, "NodeNames": kept, "Nodes": None})
    args = decode_verb_args("prioritize", prio, lists)
    assert lists.hits == 1 and args["NodeNames"] == kept
    assert encode_answer("prioritize", ext.prioritize_json(args), lists) == ext.prioritize_json(
        {"Pod": POD, "NodeNames": kept}
    )
    # a filter answer with full nodes keeps nothing
    nodes = {"Pod": POD, "Nodes": {"items": [NODE]}}
    encode_answer("filter", ext.filter(nodes), lists)
    assert decode_verb_args("prioritize", prio, lists)["NodeNames"] == kept and lists.hits == 2


def test_the_server_serves_prioritize_from_filters_names() -> None:
    ext = Extender(state_with({"n1": [small_gpu("0000:01:00.0", 20000)]}))
    server = ExtenderServer(ext, "127.0.0.1", 0)
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        body = {"Pod": POD, "NodeNames": ["n1", "n2"], "Nodes": None}
        conn.request("POST", "/filter", _encoder.encode(body))
        resp = conn.getresponse()
        filtered = msgspec.json.decode(resp.read())
        assert resp.status == 200 and filtered["NodeNames"] == ["n1"]
        assert filtered["FailedAndUnresolvableNodes"] == {"n2": "no kubeacc GPUs on this node"}
        prio = {"Pod": POD, "NodeNames": filtered["NodeNames"], "Nodes": None}
        conn.request("POST", "/prioritize", _encoder.encode(prio))
        resp = conn.getresponse()
        assert resp.status == 200 and msgspec.json.decode(resp.read())[0]["Host"] == "n1"
        assert server.lists.hits == 1
        conn.close()
    finally:
        server.stop()


def test_the_server_takes_filters_candidates_back_for_the_next_pod() -> None:
    ext = Extender(state_with({"n1": [small_gpu("0000:01:00.0", 20000)]}))
    server = ExtenderServer(ext, "127.0.0.1", 0)
    server.start()
    try:
        conn = http.client.HTTPConnection("127.0.0.1", server.port, timeout=10)
        names = ["n1", "n2"]
        answers = []
        for p in (POD, pod("q", {MEMORY: "30000"})):  # two kinds: no kept whole answer
            body = {"Pod": p, "NodeNames": names, "Nodes": None}
            conn.request("POST", "/filter", _encoder.encode(body))
            resp = conn.getresponse()
            assert resp.status == 200
            answers.append(resp.read())
            assert answers[-1] == _encoder.encode(Extender(ext.state).filter(body))
        assert server.lists.hits == 1  # the second pod's candidates: not decoded again
        assert msgspec.json.decode(answers[1])["FailedNodes"] == {
            "n1": "no GPU with 30000 MiB free (most free on one GPU: 20000 MiB)"
        }
        conn.close()
    finally:
        server.stop()
