"""kube-acc's stand-in for Nova's os-server-external-events (kubeacc.agent.dra.cyborg.events)."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest

from kubeacc.agent.dra.cyborg.events import EVENT_NAME, BindEvents


@pytest.fixture
def events() -> Iterator[BindEvents]:
    ev = BindEvents(("127.0.0.1", 0), token="s3cret")
    ev.start()
    try:
        yield ev
    finally:
        ev.stop()


def _call(ev: BindEvents, method: str, path: str, body: Any = None, token: str = "") -> Any:
    data = None if body is None else json.dumps(body).encode()
    headers = {"Content-Type": "application/json", "X-Auth-Token": token}
    req = urllib.request.Request(f"http://127.0.0.1:{ev.port}{path}", data, headers, method=method)
    try:
        with urllib.request.urlopen(req, timeout=5) as resp:
            return resp.status, json.loads(resp.read())
    except urllib.error.HTTPError as exc:
        return exc.code, json.loads(exc.read())


def _bound(arq: str, status: str = "completed") -> dict[str, Any]:
    return {"events": [{"name": EVENT_NAME, "server_uuid": "s", "tag": arq, "status": status}]}


def test_an_event_with_cyborgs_token_wakes_the_waiter(events: BindEvents) -> None:
    code, body = _call(events, "POST", "/v2.1/os-server-external-events", _bound("a1"), "s3cret")
    assert code == 200 and body["events"][0]["code"] == 200
    events.wait({"a1"}, 1.0)
    assert events.status("a1") == "completed"
    assert events.received == 1


def test_a_caller_without_the_token_wakes_nobody(events: BindEvents) -> None:
    code, _ = _call(events, "POST", "/os-server-external-events", _bound("a1"), "guess")
    assert code == 401
    assert events.status("a1") == "" and events.received == 0


def test_other_events_and_bad_bodies_are_refused(events: BindEvents) -> None:
    other = {"events": [{"name": "network-vif-plugged", "tag": "x"}]}
    code, body = _call(events, "POST", "/os-server-external-events", other, "s3cret")
    assert code == 200 and body["events"][0]["code"] == 400
    code, _ = _call(events, "POST", "/os-server-external-events", {"no": "events"}, "s3cret")
    assert code == 400
    assert events.received == 0


def test_the_version_document_a_nova_client_reads_first(events: BindEvents) -> None:
    code, body = _call(events, "GET", "/")
    assert code == 200 and body["versions"][0]["id"] == "v2.1"
    code, body = _call(events, "GET", "/v2.1/")
    assert code == 200 and body["version"]["min_version"] == "2.1"
