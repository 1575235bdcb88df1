"""Node labels: what they say about a node, and that the agent's own identity may write them on
its own Node only, through the real API server and the node-restriction admission policy."""

from __future__ import annotations

import contextlib
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Node
from lightkube.types import PatchType

from kubeacc.crds.deploy import apply_manifest
from kubeacc.model import Inventory
from kubeacc.node.nodelabels import NodeLabeler, accelerator_labels, label_value, node_labels
from kubeacc.synthetic import profiles
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.testbed.identities import agent_cert_client
from kubeacc.testbed.testbed import Testbed
from tests.hosts import discover
from tests.testbed.helpers import eventually, eventually_refused


def _inventory(profile: str, tmp: Path) -> Inventory:
    return discover(profiles.build(profile, tmp / profile))


def test_labels_of_a_gpu_server(tmp_path: Path) -> None:
    assert node_labels(_inventory("dgx-h100", tmp_path)) == {
        "kubeacc.io/gpu.count": "8",
        "kubeacc.io/gpu.model": "NVIDIA-H100-80GB-HBM3",
        "kubeacc.io/gpu.memory": "81559",
        "kubeacc.io/gpu.driver": "true",
        "kubeacc.io/gpu.driver-version": "550.90.07",
        "kubeacc.io/nic.count": "8",
        "kubeacc.io/nic.model": "ConnectX-7",
        "kubeacc.io/nic.driver": "true",
    }


def test_labels_of_an_accelerator(tmp_path: Path) -> None:
    gpu = _inventory("dgx-h100", tmp_path).devices[0]
    assert accelerator_labels("node-a", gpu) == {
        "kubeacc.io/node": "node-a",
        "kubeacc.io/type": "gpu",
        "kubeacc.io/model": "NVIDIA-H100-80GB-HBM3",
    }
    assert accelerator_labels("node-a", None) == {"kubeacc.io/node": "node-a"}


def test_no_devices_no_labels() -> None:
    assert node_labels(Inventory()) == {}


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("NVIDIA H100 80GB HBM3", "NVIDIA-H100-80GB-HBM3"),
        ("(rev a1) Alveo/U250 ", "rev-a1-Alveo-U250"),
        ("x" * 80, "x" * 63),
        ("---", ""),
    ],
)
def test_label_values_are_valid(text: str, value: str) -> None:
    assert label_value(text) == value


@pytest.fixture
def api_node(kube_client: Client) -> Iterator[str]:
    name = f"lbl-{uuid.uuid4().hex[:6]}"
    kube_client.create(Node(metadata=ObjectMeta(name=name, labels={"team": "ml"})))
    yield name
    with contextlib.suppress(ApiError):
        kube_client.delete(Node, name)


def _labels(client: Client, node: str) -> dict[str, str]:
    meta = client.get(Node, node).metadata
    return dict(meta.labels or {}) if meta else {}


@pytest.mark.cluster
def test_agent_labels_its_node_and_drops_what_it_no_longer_finds(
    testbed: Testbed, kube_client: Client, api_node: str, tmp_path: Path
) -> None:
    apply_manifest(kube_client, "rbac/agent.yaml")
    apply_manifest(kube_client, "admission/agent-node-restriction.yaml")
    agent = agent_cert_client(testbed, api_node, tmp_path)
    labeler = NodeLabeler(agent, api_node)
    gpu_server = node_labels(_inventory("dgx-h100", tmp_path))
    assert labeler.apply(gpu_server)
    assert _labels(kube_client, api_node) == {"team": "ml", **gpu_server}
    assert not labeler.apply(gpu_server)  # unchanged: no write

    # The GPUs and NICs are gone, FPGAs came: their labels replace the old ones.
    fpga_server = node_labels(_inventory("intel-fpga-dfl", tmp_path))
    labeler.apply(fpga_server)
    assert _labels(kube_client, api_node) == {"team": "ml", **fpga_server}

    # An admin's label in our prefix is not ours to remove.
    kube_client.patch(Node, api_node, {"metadata": {"labels": {"kubeacc.io/pool": "a"}}})
    labeler.remove_all()
    assert _labels(kube_client, api_node) == {"team": "ml", "kubeacc.io/pool": "a"}


@pytest.mark.cluster
def test_a_missing_node_is_not_created(kube_client: Client) -> None:
    name = f"lbl-missing-{uuid.uuid4().hex[:6]}"
    assert not NodeLabeler(kube_client, name).apply({"kubeacc.io/gpu.count": "1"})
    with pytest.raises(ApiError) as err:
        kube_client.get(Node, name)
    assert err.value.status.code == 404


@pytest.mark.cluster
def test_agent_may_not_label_other_nodes_or_other_labels(
    testbed: Testbed, kube_client: Client, api_node: str, tmp_path: Path
) -> None:
    apply_manifest(kube_client, "rbac/agent.yaml")
    apply_manifest(kube_client, "admission/agent-node-restriction.yaml")
    other = agent_cert_client(testbed, "some-other-node", tmp_path)

    def label_foreign() -> None:
        NodeLabeler(other, api_node).apply({"kubeacc.io/gpu.count": "1"}, force=True)

    msg = eventually_refused(label_foreign)
    assert msg.endswith(
        "node agent some-other-node may only change kubeacc.io/ labels of Node some-other-node"
    )

    mine = agent_cert_client(testbed, api_node, tmp_path)
    patch = {"metadata": {"labels": {"team": "hijacked"}}}
    msg = eventually_refused(lambda: mine.patch(Node, api_node, patch), timeout=0)
    assert f"may only change kubeacc.io/ labels of Node {api_node}" in msg
    msg = eventually_refused(
        lambda: mine.patch(Node, api_node, {"spec": {"unschedulable": True}}), timeout=0
    )
    assert f"may only change kubeacc.io/ labels of Node {api_node}" in msg
    mine.patch(
        Node, api_node, {"metadata": {"labels": {"kubeacc.io/x": "y"}}}, patch_type=PatchType.MERGE
    )
    eventually(lambda: _labels(kube_client, api_node).get("kubeacc.io/x") == "y", 10, "label")


@pytest.mark.cluster
def test_a_labelling_failure_does_not_stop_the_agent(
    testbed: Testbed, kube_client: Client, api_node: str, tmp_path: Path, caplog: Any
) -> None:
    from kubeacc.agent.compose import compose_agent
    from kubeacc.agent.options import options_from

    apply_manifest(kube_client, "admission/agent-node-restriction.yaml")
    other = agent_cert_client(testbed, "some-other-node", tmp_path)  # may not label api_node
    agent = compose_agent(
        SyntheticHost(profiles.build("dgx-h100", tmp_path / "host")),
        options_from(
            node_name=api_node,
            kubelet_plugin=False,
            state_dir=tmp_path / "s",
            cdi_dir=tmp_path / "cdi",
        ),
        client=other,
    )
    agent.inventory = _inventory("dgx-h100", tmp_path)
    for _ in range(3):
        agent._label(force=True)  # refused by the admission policy: logged, not raised
    warnings = [r for r in caplog.records if "cannot label node" in r.getMessage()]
    assert len(warnings) == 1
    assert "kubeacc.io/gpu.count" not in _labels(kube_client, api_node)
