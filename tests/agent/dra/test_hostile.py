"""Hostile claim references and a hung API server, through the agent's real DRA socket with
claims on the real API server: each bad reference gets its own error and changes nothing, the
good claims next to it are done whole; a stopped (SIGSTOPped, not refusing) API server holds up
only the prepare that must read it."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import grpc
import pytest
from lightkube import Client

from kubeacc.testbed import Testbed
from tests.kubeletclient import dra_v1_pb2_grpc as v1_grpc

from . import crashstream
from .agentproc import AgentProcess
from .crashstream import call, socket_path

pytestmark = pytest.mark.cluster

GPU = "gpu-0000-1b-00-0"
NUL_UID = "1234\x00abcd"
LONG_UID = "a" * 300


@pytest.fixture
def served(lone_agent: AgentProcess) -> Iterator[tuple[AgentProcess, object]]:
    lone_agent.start()
    crashstream.wait_serving(lone_agent)
    with grpc.insecure_channel(f"unix://{socket_path(lone_agent)}") as ch:
        yield lone_agent, v1_grpc.DRAPluginStub(ch)


def _state(agent: AgentProcess) -> tuple[set[str], set[str]]:
    return set(agent.checkpoint_claims()), agent.spec_uids()


def test_hostile_uids_next_to_a_real_claim(
    kube_client: Client, namespace: str, served: tuple[AgentProcess, object]
) -> None:
    agent, stub = served
    uid = crashstream.create_allocated_claim(kube_client, namespace, "real", agent.node, GPU)
    real = (namespace, "real", uid)
    out = call(stub, "prepare", [real, (namespace, "real", NUL_UID), (namespace, "x", LONG_UID)])
    assert out[uid] == ""
    assert "is not a Kubernetes UID" in out[NUL_UID]
    assert "is not a Kubernetes UID" in out[LONG_UID]
    assert _state(agent) == ({uid}, {uid})

    out = call(stub, "unprepare", [(namespace, "x", NUL_UID), real, (namespace, "x", LONG_UID)])
    assert out[uid] == ""
    assert out[NUL_UID] and out[LONG_UID]
    assert _state(agent) == (set(), set())  # the real claim is gone whole: spec and record
    assert "Traceback" not in agent.log()


def test_prepared_uid_under_another_name_is_refused(
    kube_client: Client, namespace: str, served: tuple[AgentProcess, object]
) -> None:
    agent, stub = served
    uid = crashstream.create_allocated_claim(kube_client, namespace, "real", agent.node, GPU)
    assert call(stub, "prepare", [(namespace, "real", uid)]) == {uid: ""}
    for ns, name in ((namespace, "other"), ("kube-system", "real")):
        out = call(stub, "prepare", [(ns, name, uid)])
        assert f"is prepared as ResourceClaim {namespace}/real, not {ns}/{name}" in out[uid]
        out = call(stub, "unprepare", [(ns, name, uid)])
        assert "is prepared as" in out[uid]
        assert _state(agent) == ({uid}, {uid})  # still prepared, untouched
    assert call(stub, "unprepare", [(namespace, "real", uid)]) == {uid: ""}


@pytest.mark.parametrize(
    ("namespace_", "name"),
    [("{ns}", ""), ("", "real"), ("{ns}", "a/b"), ("{ns}", "x" * 254), ("{ns}", "UPPER")],
)
def test_bad_names_are_refused_before_any_api_call(
    kube_client: Client,
    namespace: str,
    served: tuple[AgentProcess, object],
    namespace_: str,
    name: str,
) -> None:
    agent, stub = served
    ns = namespace_.format(ns=namespace)
    uid = crashstream.create_allocated_claim(kube_client, namespace, "real", agent.node, GPU)
    out = call(stub, "prepare", [(ns, name, uid)])
    assert "is not a Kubernetes" in out[uid]
    assert _state(agent) == (set(), set())


def test_hung_api_server_holds_up_only_the_prepare_that_reads_it(
    testbed: Testbed,
    kube_client: Client,
    namespace: str,
    served: tuple[AgentProcess, object],
) -> None:
    agent, stub = served
    a = (
        namespace,
        "a",
        crashstream.create_allocated_claim(kube_client, namespace, "a", agent.node, GPU),
    )
    b = (
        namespace,
        "b",
        crashstream.create_allocated_claim(kube_client, namespace, "b", agent.node, GPU),
    )
    assert call(stub, "prepare", [a, b]) == {a[2]: "", b[2]: ""}
    apiserver = testbed.control_plane.apiserver
    pid = apiserver.pid if apiserver is not None else None
    assert pid is not None
    unread = (namespace, "never-created", "0f0f0f0f-0000-4000-8000-000000000000")
    slow: dict[str, str] = {}
    prepare = threading.Thread(target=lambda: slow.update(call(stub, "prepare", [unread])))
    os.kill(pid, signal.SIGSTOP)
    try:
        prepare.start()
        time.sleep(2)  # let it reach its claim read (which hangs: the API server is stopped)
        assert call(stub, "prepare", [a]) == {a[2]: ""}  # from the checkpoint
        assert call(stub, "unprepare", [b]) == {b[2]: ""}  # needs no API server
        assert prepare.is_alive(), "the calls above waited for the prepare stuck on the API"
        prepare.join(crashstream.KUBELET_TIMEOUT_S)  # the kubelet's deadline
    finally:
        os.kill(pid, signal.SIGCONT)
    assert not prepare.is_alive()
    assert "prepare failed" in slow[unread[2]]
    assert _state(agent) == ({a[2]}, {a[2]})
    assert "Traceback" not in agent.log()
