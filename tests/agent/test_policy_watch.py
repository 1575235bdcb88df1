"""The node agent reads AcceleratorPolicies through a watch, not a LIST per loop pass.

Counted where it counts: the real API server's own ``apiserver_request_total`` for LISTs of
``acceleratorpolicies``, over an idle stretch of several agent loop passes (the old code listed
on every pass, ~every 5 s per node: ~1,000 LISTs/s at 5,000 nodes). A policy change still
reaches the node at once, since a watch event wakes the agent's loop.
"""

from __future__ import annotations

import re
import subprocess
import time
from pathlib import Path

import pytest
from lightkube import Client

from kubeacc.crds.resources import AcceleratorPolicy
from kubeacc.testbed.testbed import Testbed
from tests.controller.test_policy_sharing import shared_devices
from tests.crdfixtures import put_policy
from tests.hosts import discover
from tests.nodestack import node_stack
from tests.testbed.helpers import eventually

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

POLICY = "watch-l4-shared"
_LIST_LINE = re.compile(r"^apiserver_request_total\{(?P<labels>[^}]*)\} (?P<value>\S+)$")


def policy_lists(testbed: Testbed) -> int:
    """LISTs of acceleratorpolicies the API server has answered since it started."""
    text = subprocess.run(
        [*testbed.kubectl(), "get", "--raw", "/metrics"],
        check=True,
        capture_output=True,
        text=True,
        timeout=30,
    ).stdout
    total = 0
    for line in text.splitlines():
        m = _LIST_LINE.match(line)
        if m and 'resource="acceleratorpolicies"' in m["labels"] and 'verb="LIST"' in m["labels"]:
            total += int(float(m["value"]))
    return total


def test_policies_are_watched_not_listed_and_a_change_still_wakes_the_agent(
    testbed: Testbed, kube_client: Client, tmp_path: Path
) -> None:
    with node_stack(testbed, tmp_path, "l4-pair") as stack:
        gpus = {d.name for d in discover(stack.host).devices if d.type.value == "gpu"}
        eventually(lambda: stack.slice_device(sorted(gpus)[0]), 60, "our slice")
        time.sleep(2)  # the agent's and the controller's first LISTs are done
        before = policy_lists(testbed)
        time.sleep(16)  # three passes of the agent's loop and more
        after = policy_lists(testbed)
        assert after == before, f"{after - before} LISTs of AcceleratorPolicies while idle"

        put_policy(
            kube_client,
            POLICY,
            {"selector": {"types": ["gpu"]}, "sharing": {"mode": "MemoryShared"}},
        )
        eventually(lambda: shared_devices(kube_client, stack.node) == gpus, 30, "shared GPUs")
        kube_client.delete(AcceleratorPolicy, POLICY)
        eventually(lambda: shared_devices(kube_client, stack.node) == set(), 30, "whole GPUs")
        assert policy_lists(testbed) == after  # the watch carried both changes
        assert "Traceback" not in stack.agent.log()
