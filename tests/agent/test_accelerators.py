"""kubeacc.agent.accelerators: a round of writing the devices' users that fails (API server
away or busy, kubelet away) is tried again after a growing pause, never once a second for
ever (a fleet of agents would keep a recovering API server busy)."""

from __future__ import annotations

import itertools
import logging
import re
import time

import pytest
from lightkube import Client

from kubeacc.agent.accelerators import AcceleratorSync
from kubeacc.agent.users import Users
from kubeacc.testbed.testbed import Testbed


def test_failed_rounds_back_off_doubling(
    testbed: Testbed,
    kubeacc_crds: None,
    kube_client: Client,
    caplog: pytest.LogCaptureFixture,
) -> None:
    rounds: list[float] = []

    def kubelet_away() -> Users:
        rounds.append(time.monotonic())
        raise ConnectionRefusedError("pod-resources socket: connection refused")

    sync = AcceleratorSync(kube_client, "backoff-node", kubelet_away)
    with caplog.at_level(logging.WARNING, logger="kubeacc.agent.accelerators"):
        sync.start()
        try:
            deadline = time.monotonic() + 60
            while len(rounds) < 4:  # 1 + 2 + 4 s of pauses (with jitter) between them
                assert time.monotonic() < deadline, f"only {len(rounds)} rounds"
                time.sleep(0.2)
        finally:
            sync.stop()
    planned = [float(d) for d in re.findall(r"retrying in ([0-9.]+) s", caplog.text)]
    assert len(planned) >= 3, caplog.text
    # each pause at least the doubled backoff, at most half again of jitter
    for pause, base in zip(planned, (1.0, 2.0, 4.0), strict=False):
        assert base <= pause <= base * 1.5 + 0.05, planned
    # and the rounds were that far apart (no round before its pause was over)
    gaps = [b - a for a, b in itertools.pairwise(rounds)]
    # (the log rounds the pause to 0.1 s)
    assert all(g >= p - 0.05 for g, p in zip(gaps, planned, strict=False)), (gaps, planned)
