"""kubeacc.retryafter: a busy API server's 429 answers waited out and the request sent again,
on a real kube-apiserver with tiny in-flight limits (tests/faults/throttle.py)."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import httpx2
import pytest
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import ConfigMap

from kubeacc import retryafter
from kubeacc.clientconfig import make_client
from kubeacc.testbed import Testbed
from kubeacc.testbed.identities import cert_kubeconfig
from tests.faults.throttle import (
    LIMIT_FLAGS,
    MutatingSlotHeld,
    bind_cluster_admin,
    restart_apiserver,
)


def _answer(code: int, retry: str | None) -> httpx2.Response:
    headers = {"Retry-After": retry} if retry is not None else {}
    return httpx2.Response(code, headers=headers)


def test_which_answers_are_sent_again_and_after_how_long() -> None:
    assert retryafter.retry_after(_answer(429, "1")) == 1.0
    assert retryafter.retry_after(_answer(429, "0")) == 1.0  # never at once: no hot loop
    assert retryafter.retry_after(_answer(503, "7")) == 7.0
    assert retryafter.retry_after(_answer(429, "3600")) == retryafter.MAX_WAIT
    # no Retry-After (a 504 while etcd is away), a date, or an answer that is not a refusal
    assert retryafter.retry_after(_answer(504, None)) is None
    assert retryafter.retry_after(_answer(429, "Wed, 21 Oct 2026 07:28:00 GMT")) is None
    assert retryafter.retry_after(_answer(409, "1")) is None
    assert retryafter.retry_after(_answer(200, "1")) is None


def _configmap(name: str) -> ConfigMap:
    return ConfigMap(metadata=ObjectMeta(name=name, namespace="default"), data={"k": "v"})


@pytest.mark.cluster
def test_a_write_refused_with_429_is_sent_again_once_the_server_has_room(tmp_path: Path) -> None:
    with Testbed.start(tmp_path / "tb", with_kubelet=False) as tb:
        user = "kubeacc:test:throttled"
        bind_cluster_admin(tb.client(field_manager="kubeacc-test"), user)
        kubeconfig = cert_kubeconfig(tb, tmp_path, user, ())
        plain = Client(KubeConfig.from_file(kubeconfig), field_manager="kubeacc-test")
        ours = make_client(kubeconfig, field_manager="kubeacc-test")
        restart_apiserver(tb, LIMIT_FLAGS, 60)
        written: list[object] = []
        with MutatingSlotHeld(tb):
            # the fixture bites: a client that does not wait gets the 429 itself (plain text,
            # so lightkube raises httpx2's error, not an ApiError)
            with pytest.raises(httpx2.HTTPStatusError) as refused:
                plain.create(_configmap("plain"))
            assert refused.value.response.status_code == 429
            assert refused.value.response.headers["Retry-After"] == "1"
            before = retryafter.waited.get(429, 0)
            writer = threading.Thread(
                target=lambda: written.append(ours.create(_configmap("ours"))), daemon=True
            )
            writer.start()
            # the slot stays held until our client was refused at least once
            deadline = time.monotonic() + 30
            while retryafter.waited.get(429, 0) == before and writer.is_alive():
                assert time.monotonic() < deadline, "never refused"
                time.sleep(0.1)
        writer.join(60)
        assert written, "the write was not sent again once the slot was free"
        assert retryafter.waited[429] > before
        got = plain.get(ConfigMap, "ours", namespace="default")
        assert got.data == {"k": "v"}

        # a client with a deadline (the agent's claim reads) gives the 429 back within its
        # budget while the server stays busy
        hurried = make_client(kubeconfig, field_manager="kubeacc-test", wait_budget=2.0)
        with MutatingSlotHeld(tb):
            before = retryafter.waited.get(429, 0)
            with pytest.raises(httpx2.HTTPStatusError) as given_back:
                hurried.create(_configmap("hurried"))
            assert given_back.value.response.status_code == 429
            assert retryafter.waited.get(429, 0) - before <= 1  # 1 s + jitter fits 2 s once
