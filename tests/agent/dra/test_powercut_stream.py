"""Real power cuts under a prepare/unprepare stream: the agent's state and CDI directories on the
lazy file system (kubeacc/testbed/lazyfs.py), the agent SIGKILLed at random moments and, at the
same instant, every write it had not made durable dropped (unflushed file data, unflushed
directory entries). After every boot the agent must start (no refusal), and its checkpoint,
its CDI directory and the client's acknowledged calls must agree: 0 acknowledged claims lost,
0 resurrected (crashstream.py, the same checks as the kill test). The CDI directory is kept
across the cuts as a disk one (``/etc/cdi``) would be: a spec must not outlive its claim's
checkpoint entry, nor the reverse."""

from __future__ import annotations

import os

import pytest
from lightkube import Client

from . import crashstream
from .lazystate import PowerCutAgent

pytestmark = pytest.mark.cluster

CUTS = int(os.environ.get("KUBEACC_POWER_CUTS", "30"))


@pytest.mark.parametrize("lone_agent", [PowerCutAgent], indirect=True)
def test_random_power_cuts_lose_nothing_acknowledged_and_never_stop_the_agent_starting(
    kube_client: Client, namespace: str, lone_agent: PowerCutAgent
) -> None:
    refs = crashstream.allocated_refs(kube_client, namespace, lone_agent.node)
    seed = int(os.environ.get("KUBEACC_POWER_SEED", "0")) or int.from_bytes(os.urandom(4), "big")
    tally = crashstream.run(lone_agent, refs, kills=CUTS, seed=seed)
    print(f"seed {seed}: {tally}; power cuts {lone_agent.lazy.cuts}")
    assert tally.problems() == 0, f"seed {seed}: {tally}"
    # every kill was a cut (the last stop a clean shutdown), and the stream ran between them
    assert lone_agent.lazy.cuts == CUTS
    assert tally.calls >= 2 * CUTS, tally
    # the agent started after every cut: wait_serving raises on an agent that exits (a refusal
    # to start is an exit with one line for the operator)
    assert "Traceback" not in lone_agent.log()
