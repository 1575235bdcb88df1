"""An AMD GPU's container on the testbed's real runtime (containerd + runc): the CDI spec the
agent writes for the claim alone gives it ``/dev/kfd`` and the GPU's render node, as ROCm needs
them, and, because the host restricts both to a group (``0660``, the render group), that
group: a container running as a user other than root opens both nodes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from kubeacc.synthetic import profiles
from kubeacc.testbed import Testbed
from tests.agent.dra.test_mig_e2e import gpu_claim
from tests.agent.runtimeprobe import claimed, probe_log, probe_pod, start_agent
from tests.agent.test_real_runtime import wait_running
from tests.hosts import discover

pytestmark = pytest.mark.cluster

RENDER_GID = 4242
AMD = 'device.attributes["kubeacc.io"].vendor == "AMD"'


@pytest.fixture
def amd_host(runtime_testbed: Testbed, tmp_path: Path) -> Path:
    """Four AMD GPUs (and an Intel one); /dev/kfd and the render nodes root:4242 0660."""
    root = profiles.build("amd-gpu", tmp_path / "host")
    nodes = sorted({n for d in discover(root).devices for n in d.device_nodes})
    for made in runtime_testbed.kubelet.mknod(nodes):
        if made.name == "kfd" or made.name.startswith("renderD"):
            os.chown(made, 0, RENDER_GID)
            made.chmod(0o660)
    return root


def test_an_amd_gpu_container_opens_kfd_and_its_render_node(
    runtime_testbed: Testbed, runtime_namespace: str, amd_host: Path, tmp_path: Path
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    a = start_agent(tb, amd_host, tmp_path)
    try:
        a.wait_registered()
        client.create(gpu_claim("amd", ns, AMD))
        script = (
            "grep ^Groups: /proc/self/status; ls /dev/dri; for n in /dev/kfd /dev/dri/renderD*; do "
            "cat $n >/dev/null && echo opened $n || echo refused $n; done"
        )
        pod = probe_pod(
            "amd",
            ns,
            script,
            {},
            {},
            securityContext={"runAsUser": 1000, "runAsGroup": 1000},
            **claimed("amd"),
        )
        client.create(pod)
        wait_running(client, "amd", ns)
        out = probe_log(tb, ns, "amd")
    finally:
        a.stop()
    lines = out.splitlines()
    assert str(RENDER_GID) in lines[0].split()[1:], out  # the host's render group
    render = [line for line in lines if line.startswith(("opened", "refused"))]
    assert "opened /dev/kfd" in render, out
    assert len(render) == 2 and all(line.startswith("opened") for line in render), out
    assert any(line.startswith("card") for line in lines), out
