"""A randomized crash test: a child agent SIGKILLed at random moments of a long prepare/unprepare
stream (batches of 1-3 claims) that crosses a journal compaction every three calls, driven
through its real DRA socket, claims read from the real API server. After every restart the
checkpoint, the CDI directory and the client's acknowledged calls agree. The long form (100+
kills) is bench/dra_crash.py."""

from __future__ import annotations

import os

import pytest
from lightkube import Client

from . import crashstream
from .agentproc import AgentProcess

pytestmark = pytest.mark.cluster


def test_random_kills_lose_and_resurrect_nothing(
    kube_client: Client, namespace: str, lone_agent: AgentProcess
) -> None:
    refs = crashstream.allocated_refs(kube_client, namespace, lone_agent.node)
    seed = int.from_bytes(os.urandom(4), "big")
    tally = crashstream.run(lone_agent, refs, kills=15, seed=seed)
    print(f"seed {seed}: {tally}")
    assert tally.problems() == 0, f"seed {seed}: {tally}"
    assert tally.kills == 15
    # the stream did run between the kills, through a compaction every three calls
    assert tally.calls >= 3 * 15
    assert "Traceback" not in lone_agent.log()
