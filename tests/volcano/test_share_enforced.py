"""A memory share that Volcano places is held to its limit in a real container.

Volcano's scheduler and controller manager run on the real-runtime testbed (containerd + runc)
for this module; the pod names ``schedulerName: volcano`` and a DRA share of 1 GiB of a
memory-shared H100. Volcano binds it (kube-scheduler never looks at it), the node agent
prepares the share with the share-limit library preloaded, and the container's probe, through
the stand-in CUDA driver, sees 1024 MiB and is refused past it: the same run as
tests/agent/test_sharelimit_runtime.py under kube-scheduler.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from lightkube.resources.core_v1 import Pod

from kubeacc.testbed import Testbed
from kubeacc.testbed.volcano import SCHEDULER_NAME, Volcano
from kubeacc.testbed.volcano import ensure_built as ensure_volcano
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.runtimeprobe import claimed, share_claim
from tests.agent.test_real_runtime import host, wait_running
from tests.agent.test_sharelimit_runtime import (
    assert_held_to_its_share,
    dra_agent,
    driver_root,
    share_probe_pod,
)

from .conftest import REQUESTS

pytestmark = pytest.mark.cluster
__all__ = ["dra_agent", "driver_root", "host"]  # the fixtures


@pytest.fixture(scope="module")
def volcano_on_runtime(runtime_testbed: Testbed) -> Iterator[Volcano]:
    """Volcano on the real-runtime testbed while this module runs."""
    tb = runtime_testbed
    v = Volcano(tb.workdir, tb.logs_dir, tb.kubeconfig, tb.kubectl(), ensure_volcano()).start()
    try:
        yield v
    finally:
        v.stop()


def test_a_share_volcano_places_is_held_to_its_limit_in_a_real_container(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    volcano_on_runtime: Volcano,
    dra_agent: AgentProcess,
    driver_root: tuple[Path, Path],
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    client.create(share_claim("share", ns))
    spec = claimed("share")
    spec["container"]["resources"]["requests"] = dict(REQUESTS)
    pod = share_probe_pod("vc-share", ns, driver_root[1], schedulerName=SCHEDULER_NAME, **spec)
    client.create(pod)
    wait_running(client, "vc-share", ns)
    bound = client.get(Pod, "vc-share", namespace=ns)
    assert bound.spec and bound.spec.schedulerName == SCHEDULER_NAME
    assert bound.spec.nodeName == tb.node_name
    log = (tb.logs_dir / "vc-scheduler.log").read_text(errors="replace")
    # Volcano, not kube-scheduler, placed it
    assert f"Binding Task <{ns}/vc-share> to node <{tb.node_name}>" in log
    assert_held_to_its_share(tb, ns, "vc-share")
    client.delete(Pod, "vc-share", namespace=ns, grace_period=0)
