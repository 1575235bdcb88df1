"""kubeacc.crds.events: an Event that cannot be recorded is logged, never raised, whatever the
API server did: refused it (an ApiError) or could not be reached or timed out (httpx2's errors,
as while it is away or etcd is down)."""

from __future__ import annotations

import logging

import pytest
from lightkube import Client
from lightkube.config.kubeconfig import KubeConfig

from kubeacc.crds.events import emit_event
from kubeacc.testbed.procs import free_port


def test_an_event_the_api_server_never_got_is_logged_not_raised(
    caplog: pytest.LogCaptureFixture,
) -> None:
    # nothing listens on the port: the connection is refused, as while the API server is away
    config = KubeConfig.from_dict(
        {
            "clusters": [
                {
                    "name": "away",
                    "cluster": {
                        "server": f"https://127.0.0.1:{free_port()}",
                        "insecure-skip-tls-verify": True,
                    },
                }
            ],
            "contexts": [{"name": "away", "context": {"cluster": "away", "user": "nobody"}}],
            "users": [{"name": "nobody", "user": {}}],
            "current-context": "away",
        }
    )
    client = Client(config, field_manager="kubeacc-test")
    node = {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1", "uid": "n1"}}
    with caplog.at_level(logging.WARNING, logger="kubeacc.crds.events"):
        emit_event(client, node, "DevicesChanged", "two GPUs", component="kubeacc-agent-n1")
    assert "event DevicesChanged on n1 not recorded" in caplog.text
