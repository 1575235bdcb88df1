"""WatchCache against the real API server: list, follow, wake, close; and its filters."""

from __future__ import annotations

import threading
import uuid
from typing import Any

import httpx2
from lightkube import ApiError, Client

from kubeacc.crds.resources import AcceleratorPolicy
from kubeacc.crds.watch import WatchCache, ignoring, membership, relist_delay
from kubeacc.testbed.testbed import Testbed
from tests.crdfixtures import put_policy, wait_for


def _policy(client: Client, name: str, types: list[str]) -> None:
    put_policy(client, name, {"selector": {"types": types}})


def test_cache_follows_creates_changes_and_deletes(
    testbed: Testbed, kubeacc_crds: None, kubeacc_cleanup: None, kube_client: Client
) -> None:
    before = f"watch-a-{uuid.uuid4().hex[:5]}"
    _policy(kube_client, before, ["gpu"])
    woken = threading.Event()
    cache = WatchCache(kube_client, AcceleratorPolicy, on_change=woken.set, name="test-watch")
    cache.start()
    try:
        assert cache.synced.wait(30)
        assert cache.get(before) is not None  # from the initial LIST
        woken.clear()

        after = f"watch-b-{uuid.uuid4().hex[:5]}"
        _policy(kube_client, after, ["fpga"])
        wait_for("created policy in the cache", lambda: cache.get(after))
        assert woken.is_set()

        _policy(kube_client, after, ["nic"])
        wait_for(
            "changed policy in the cache",
            lambda: (
                (cache.get(after) or {}).get("spec", {}).get("selector", {}).get("types") == ["nic"]
            ),
        )
        kube_client.delete(AcceleratorPolicy, before)
        wait_for("deleted policy gone from the cache", lambda: cache.get(before) is None)
        assert cache.lists == 1  # one LIST, then only the watch
    finally:
        cache.close()
    # close() ends a watch that is blocked waiting for the next event
    assert cache._thread is not None and not cache._thread.is_alive()


def test_a_paged_list_keeps_only_what_keep_returns(
    testbed: Testbed, kubeacc_crds: None, kubeacc_cleanup: None, kube_client: Client
) -> None:
    names = [f"watch-p{i}-{uuid.uuid4().hex[:5]}" for i in range(5)]
    for name in names:
        _policy(kube_client, name, ["gpu"])

    def keep(obj: dict[str, Any]) -> dict[str, Any]:
        meta = obj["metadata"]
        return {"metadata": {"name": meta["name"], "resourceVersion": meta["resourceVersion"]}}

    cache = WatchCache(kube_client, AcceleratorPolicy, keep=keep, page=2, name="test-paged")
    cache.start()
    try:
        assert cache.synced.wait(30)
        listed = cache.by_name()
        assert set(names) <= set(listed)  # three pages of at most two
        assert all(set(obj) == {"metadata"} for obj in listed.values())
        _policy(kube_client, names[0], ["nic"])  # a watch event is cut down too
        wait_for(
            "the change in the cache",
            lambda: (
                (cache.get(names[0]) or {})["metadata"]["resourceVersion"]
                != listed[names[0]]["metadata"]["resourceVersion"]
            ),
        )
        assert set(cache.get(names[0]) or {}) == {"metadata"}
        assert cache.lists == 1
    finally:
        cache.close()


def test_no_reader_sees_an_event_before_wake_if_has_taken_it_in(
    testbed: Testbed, kubeacc_crds: None, kubeacc_cleanup: None, kube_client: Client
) -> None:
    """An owner that keeps state in ``wake_if`` (the extender) must never be read behind its
    cache: a reader that finds the changed object must find the owner's state changed too."""
    name = f"watch-w-{uuid.uuid4().hex[:5]}"
    _policy(kube_client, name, ["gpu"])
    state: dict[str, Any] = {}
    seen: list[tuple[list[str], list[str] | None]] = []
    readers: list[threading.Thread] = []
    cache: WatchCache

    def read() -> None:
        obj = cache.get(name) or {}
        seen.append((obj["spec"]["selector"]["types"], state.get("types")))

    def wake_if(old: dict[str, Any] | None, new: dict[str, Any] | None) -> bool:
        if old is not None and new is not None:
            reader = threading.Thread(target=read)  # reads while the owner is mid-update
            readers.append(reader)
            reader.start()
            reader.join(0.3)
            state["types"] = new["spec"]["selector"]["types"]
        return True

    cache = WatchCache(kube_client, AcceleratorPolicy, wake_if=wake_if, name="test-wake-order")
    cache.start()
    try:
        assert cache.synced.wait(30)
        _policy(kube_client, name, ["nic"])
        wait_for("the reader ran", lambda: readers and not readers[0].is_alive())
    finally:
        cache.close()
    # the reader waited for the owner, or saw neither: never the new object with old state
    assert seen == [(["nic"], ["nic"])]


def test_observe_keeps_the_newer_object(testbed: Testbed, kube_client: Client) -> None:
    cache = WatchCache(kube_client, AcceleratorPolicy)

    def obj(rv: str, types: list[str]) -> dict[str, object]:
        return {
            "metadata": {"name": "p", "resourceVersion": rv},
            "spec": {"selector": {"types": types}},
        }

    cache.observe(obj("120", ["gpu"]))
    cache.observe(obj("99", ["fpga"]))  # an older event arriving late
    assert (cache.get("p") or {})["spec"]["selector"]["types"] == ["gpu"]
    cache.observe(obj("121", ["nic"]))
    assert (cache.get("p") or {})["spec"]["selector"]["types"] == ["nic"]
    cache.forget("p")
    assert cache.get("p") is None


def test_wake_filters() -> None:
    acc = {
        "metadata": {"name": "a", "resourceVersion": "1"},
        "status": {"lastSeen": "t1", "device": {"health": {"state": "Healthy"}}},
    }
    resync = {
        "metadata": {"name": "a", "resourceVersion": "2"},
        "status": {"lastSeen": "t2", "device": {"health": {"state": "Healthy"}}},
    }
    sick = {
        "metadata": {"name": "a", "resourceVersion": "3"},
        "status": {"lastSeen": "t2", "device": {"health": {"state": "Unhealthy"}}},
    }
    wake = ignoring(("status", "lastSeen"))
    assert not wake(acc, resync)
    assert wake(resync, sick)
    assert wake(None, acc) and wake(acc, None)
    assert acc["status"]["lastSeen"] == "t1"  # the objects themselves are left alone
    assert membership(None, acc) and membership(acc, None) and not membership(acc, sick)


def _refused(retry: str | None) -> ApiError:
    """A 429 as kube-apiserver's max-in-flight filter answers it."""
    body = {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": 429}
    headers = {"Content-Type": "application/json", **({"Retry-After": retry} if retry else {})}
    request = httpx2.Request("GET", "https://127.0.0.1/api/v1/nodes")
    return ApiError(request=request, response=httpx2.Response(429, json=body, headers=headers))


def test_a_relist_after_a_429_waits_at_least_its_retry_after() -> None:
    # the watch's own backoff starts at half a second; the server asked for one
    delays = [relist_delay(_refused("1"), 0.5) for _ in range(50)]
    assert min(delays) >= 1.0
    assert max(delays) <= 1.5
    # without Retry-After, or another failure: the backoff with jitter alone
    assert all(0.25 <= relist_delay(_refused(None), 0.5) <= 0.5 for _ in range(50))
    assert all(0.25 <= relist_delay(ConnectionError("reset"), 0.5) <= 0.5 for _ in range(50))
    # the max-in-flight filter's own answer is plain text: lightkube raises httpx2's error
    request = httpx2.Request("GET", "https://127.0.0.1/api/v1/nodes")
    text = httpx2.Response(429, text="Too many requests", headers={"Retry-After": "1"})
    plain = httpx2.HTTPStatusError("429", request=request, response=text)
    assert relist_delay(plain, 0.5) >= 1.0
