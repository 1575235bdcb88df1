"""Real power cuts under a prepare/unprepare stream: the agent's state and CDI directories on the
lazy file system (kubeacc/testbed/lazyfs.py), the agent SIGKILLed at random moments and, at the
same instant, every write it had not made durable dropped (unflushed file data, unflushed
directory entries). After every boot the agent must start (no refusal), and its checkpoint,
its CDI directory and the client's acknowledged calls must agree (crashstream.py, the checks
of the kill test): 0 acknowledged prepares lost, no spec without its checkpoint entry nor the
reverse. The CDI directory is kept across the cuts as a disk one (``/etc/cdi``) would be.

An acknowledged unprepare may come back: its journal line is not flushed, by design
(kubeacc/agent/dra/checkpoint.py), and the claim is then recorded as prepared again. That is
counted, and the way it is undone is checked at the end: once the API says the claims are
unused (deallocated, as the ResourceClaim controller does when their pods are gone), the
agent's start-up sweep (kubeacc/agent/dra/stale.py) unprepares every one of them."""

from __future__ import annotations

import os

import pytest
from lightkube import Client
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.dra.checkpoint import read_claims
from kubeacc.node import cdi

from ...testbed.helpers import eventually
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
    # an unprepare a cut dropped comes back (above); nothing else may be off
    assert tally.problems() == len(tally.resurrected), f"seed {seed}: {tally}"
    assert tally.lost == [], f"seed {seed}: {tally}"
    # every kill was a cut (the last stop a clean shutdown), and the stream ran between them
    assert lone_agent.lazy.cuts == CUTS
    assert tally.calls >= 2 * CUTS, tally
    # the agent started after every cut: wait_serving raises on an agent that exits (a refusal
    # to start is an exit with one line for the operator)
    assert "Traceback" not in lone_agent.log()

    # the claims deallocated, a boot: the sweep unprepares whatever is still recorded
    for namespace_, name, _ in refs:
        kube_client.patch(
            ResourceClaim.Status,
            name,
            {"status": {"allocation": None}},
            namespace=namespace_,
            patch_type=PatchType.MERGE,
        )
    lone_agent.start(extra=["--compact-after=3"])
    crashstream.wait_serving(lone_agent)
    eventually(
        lambda: not read_claims(lone_agent.state_dir) and not cdi.spec_uids(lone_agent.cdi_dir),
        60,
        "every unused claim unprepared by the start-up sweep",
        log=lone_agent.log,
    )
