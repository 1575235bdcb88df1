"""FPGAs programmed before binding (binding conditions), on two real kubelets with the real
kube-scheduler.

``fpga-a`` has a PAC N3000, ``fpga-b`` a PAC Arria 10, both empty; the AcceleratorPolicy allows
the claim's bitstream on the Arria 10 model only. The node agents run with their own
certificate identities under deploy/rbac and the admission policy. First only ``fpga-a``'s agent
runs: the scheduler allocates its card, waits in PreBind, the agent refuses the bitstream and
reports the failure condition, and the pod stays unbound with the card untouched; a namespace
user allowed to patch the claim's status cannot write the condition in its stead. Then
``fpga-b``'s agent starts, with a synthetic partial reconfiguration of several seconds: the pod
is allocated the Arria 10 and is not bound while the bitstream loads (every sample where the pod
has a node finds the bitstream in), then runs there; prepare only checks the card.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
from lightkube import ApiError, Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Event, Namespace, Pod
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

from kubeacc.agent.dra.fpga.conditions import FAILED, PROGRAMMED
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.crds.api import API_VERSION
from kubeacc.crds.opaque import fpga_claim_config
from kubeacc.crds.resources import as_dict, install_crds
from kubeacc.model import DeviceType
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic.fpga import ZERO_ID
from kubeacc.synthetic.hosts_fpga import PAC_ARRIA10, PAC_N3000, IntelCard, intel_fpga_server
from kubeacc.synthetic.kernel import PR_SECONDS_FILE
from kubeacc.synthetic.tree import HostBuilder
from kubeacc.testbed.identities import agent_kubeconfig, cert_client
from kubeacc.testbed.kubelet import KubeletOptions
from kubeacc.testbed.procs import free_port
from kubeacc.testbed.testbed import Testbed
from tests.hosts import discover
from tests.metrics.scrape import value
from tests.nodestack import claim_pod, install, pod_phase, resource_claim
from tests.testbed.helpers import eventually

from .agentproc import AgentProcess

pytestmark = pytest.mark.cluster

NODE_A = "fpga-a"
NODE_B = "fpga-b"
NS = "binding"
AFU = "0123456789abcdef0123456789abcdef"
#: The synthetic partial reconfiguration on fpga-b (seconds): the scheduler polls every 5 s.
PR_SECONDS = 8


@dataclass
class Cluster:
    work: Path
    tb: Testbed
    client: Client
    hosts: dict[str, Path]
    agents: dict[str, AgentProcess]
    digest: str
    #: Each running agent's metrics port.
    ports: dict[str, int] = field(default_factory=dict)


def _host(root: Path, node: str, card: IntelCard) -> Path:
    b = HostBuilder(root, seed=node)
    intel_fpga_server(b, node, ((card, ZERO_ID),))
    b.mark(f"binding-{node}")
    return root


def allow_arria(client: Client, model: str, digest: str, ns: str) -> None:
    """The AcceleratorPolicy that allows ``arria.gbs`` on ``model`` cards, and the test's
    namespace ``ns``."""
    client.create(
        from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorPolicy",
                "metadata": {"name": "arria-bitstreams"},
                "spec": {
                    "selector": {"types": ["fpga"], "models": [model]},
                    "allowedBitstreams": [{"name": "arria.gbs", "sha256": digest}],
                },
            }
        )
    )
    client.create(Namespace(metadata={"name": ns}))  # type: ignore[arg-type]


def _card(host: Path) -> Any:
    (card,) = discover(host).by_type(DeviceType.FPGA)
    return card


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Cluster]:
    tb = Testbed.start(nodes=[KubeletOptions(node_name=NODE_A), KubeletOptions(node_name=NODE_B)])
    work = tmp_path_factory.mktemp("binding")
    agents: dict[str, AgentProcess] = {}
    try:
        client = tb.client(field_manager="kubeacc-test")
        install_crds(tb.client(field_manager="kubeacc-test-crds"))
        install(tb)
        gbs = make_gbs(AFU, PAC_ARRIA10.compat_id, b"arria" * 200, name="arria")
        digest = hashlib.sha256(gbs).hexdigest()
        hosts = {}
        for node, card in ((NODE_A, PAC_N3000), (NODE_B, PAC_ARRIA10)):
            hosts[node] = _host(work / node / "host", node, card)
            library = work / node / "bitstreams"
            library.mkdir()
            (library / "arria.gbs").write_bytes(gbs)
            agents[node] = AgentProcess(
                node,
                hosts[node],
                agent_kubeconfig(tb, node, work / node),
                tb.node(node).root_dir,
                work / node,
            )
        (hosts[NODE_B] / PR_SECONDS_FILE).write_text(f"{PR_SECONDS}\n")
        allow_arria(client, _card(hosts[NODE_B]).model, digest, NS)
        yield Cluster(work, tb, client, hosts, agents, digest)
    finally:
        for agent in agents.values():
            agent.stop()
        tb.stop()


def start_binding_agent(agent: AgentProcess, library: Path) -> int:
    """Start the agent with the bitstream library and a metrics port; the port."""
    port = free_port()
    extra = [
        f"--bitstream-dir={library}",
        "--simulate-kernel",
        f"--metrics-address=127.0.0.1:{port}",
    ]
    agent.start(extra=extra, apply_classes=False)
    agent.wait_registered(120)
    return port


def _start(c: Cluster, node: str) -> None:
    agent = c.agents[node]
    c.ports[node] = start_binding_agent(agent, agent.state_dir.parent / "bitstreams")


def _bindings(c: Cluster, node: str, outcome: str, reason: str) -> float:
    """``kubeacc_agent_fpga_bindings_total`` as ``node``'s agent serves it."""
    return value(c.ports[node], "kubeacc_agent_fpga_bindings_total", outcome=outcome, reason=reason)


def _claim_events(c: Cluster) -> list[Event]:
    return [
        ev
        for ev in c.client.list(Event, namespace=NS)
        if ev.involvedObject
        and (ev.involvedObject.kind, ev.involvedObject.name) == ("ResourceClaim", "fpga")
    ]


def _claim_status(c: Cluster) -> dict[str, Any]:
    return as_dict(c.client.get(ResourceClaim, "fpga", namespace=NS)).get("status") or {}


def _pool(status: dict[str, Any]) -> str | None:
    results = ((status.get("allocation") or {}).get("devices") or {}).get("results") or []
    return str(results[0]["pool"]) if results else None


def _node_name(c: Cluster) -> str:
    pod = c.client.get(Pod, "app", namespace=NS)
    return (pod.spec.nodeName if pod.spec else None) or ""


def test_bitstream_loaded_before_binding_and_refused_one_goes_elsewhere(cluster: Cluster) -> None:
    c = cluster
    config = [fpga_claim_config("arria.gbs", f"sha256:{c.digest}")]
    _start(c, NODE_A)
    requests = [{"name": "fpga", "exactly": {"deviceClassName": "fpga.kubeacc.io"}}]
    c.client.create(resource_claim("fpga", NS, requests, config))
    c.client.create(claim_pod("app", NS, "fpga"))

    # fpga-a alone: allocated, refused by its agent, the pod never bound there
    eventually(
        lambda: "BitstreamNotAllowed" in c.agents[NODE_A].log(),
        120,
        "fpga-a's agent refusing the bitstream",
    )
    assert _node_name(c) == ""
    card_a = _card(c.hosts[NODE_A])
    assert card_a.fpga and card_a.fpga.afu_id is None, "nothing loaded on fpga-a"
    # the refusal counted on fpga-a's metrics endpoint and recorded as a Warning on the claim
    eventually(
        lambda: _bindings(c, NODE_A, "failed", "BitstreamNotAllowed") >= 1,
        30,
        "the refusal counted",
    )
    assert _bindings(c, NODE_A, "programmed", "Programmed") == 0
    eventually(
        lambda: any(ev.reason == "BitstreamNotAllowed" for ev in _claim_events(c)),
        30,
        "the refusal as an Event on the claim",
    )
    refusal = next(ev for ev in _claim_events(c) if ev.reason == "BitstreamNotAllowed")
    assert refusal.type == "Warning"
    assert refusal.reportingComponent == f"kubeacc-agent-{NODE_A}"
    assert card_a.name in (refusal.message or "") and NODE_A in (refusal.message or "")
    _user_cannot_write_the_condition(c, card_a.name)

    # fpga-b joins: the pod goes there, and is bound only once the bitstream is in
    _start(c, NODE_B)
    device_b = _card(c.hosts[NODE_B]).name
    waited = 0

    def sample() -> bool:
        nonlocal waited
        status = _claim_status(c)
        node = _node_name(c)
        card = _card(c.hosts[NODE_B])
        if node:
            assert node == NODE_B, f"bound to {node}"
            assert card.fpga and card.fpga.afu_id == AFU, "bound before the bitstream was in"
        elif _pool(status) == NODE_B and card.fpga and card.fpga.afu_id is None:
            waited += 1  # allocated on fpga-b, loading, not bound
        return pod_phase(c.client, "app", NS) == "Running"

    eventually(sample, 240, "the pod Running on fpga-b")
    assert waited > 0, "the pod was never seen waiting for its bitstream"
    card_a = _card(c.hosts[NODE_A])
    assert card_a.fpga and card_a.fpga.afu_id is None

    status = _claim_status(c)
    assert _pool(status) == NODE_B
    (entry,) = [d for d in status.get("devices") or [] if d["pool"] == NODE_B]
    assert entry["device"] == device_b
    conds = {cond["type"]: cond for cond in entry["conditions"]}
    assert conds[PROGRAMMED]["status"] == "True"
    assert conds[PROGRAMMED]["reason"] == "Programmed"
    assert FAILED not in conds
    assert "carries AFU" in c.agents[NODE_B].log(), "prepare only checked the card"
    assert _bindings(c, NODE_B, "programmed", "Programmed") == 1
    assert _bindings(c, NODE_B, "failed", "BitstreamNotAllowed") == 0
    (programmed,) = [ev for ev in _claim_events(c) if ev.reason == "Programmed"]
    assert programmed.type == "Normal"
    assert programmed.reportingComponent == f"kubeacc-agent-{NODE_B}"
    assert device_b in (programmed.message or "")

    events = [
        ev.message or ""
        for ev in c.client.list(Event, namespace=NS)
        if ev.involvedObject and ev.involvedObject.name == "app"
    ]
    assert any("BitstreamNotAllowed" in m for m in events), events


def _user_cannot_write_the_condition(c: Cluster, device: str) -> None:
    """A namespace user allowed to patch claim status still cannot say "programmed": the API
    server's per-driver check wants the resourceclaims/driver verbs for kubeacc.io."""
    c.client.create(
        from_dict(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "Role",
                "metadata": {"name": "claim-status", "namespace": NS},
                "rules": [
                    {
                        "apiGroups": ["resource.k8s.io"],
                        "resources": ["resourceclaims", "resourceclaims/status"],
                        "verbs": ["get", "patch", "update"],
                    }
                ],
            }
        )
    )
    c.client.create(
        from_dict(
            {
                "apiVersion": "rbac.authorization.k8s.io/v1",
                "kind": "RoleBinding",
                "metadata": {"name": "claim-status", "namespace": NS},
                "roleRef": {
                    "apiGroup": "rbac.authorization.k8s.io",
                    "kind": "Role",
                    "name": "claim-status",
                },
                "subjects": [
                    {"apiGroup": "rbac.authorization.k8s.io", "kind": "User", "name": "mallory"}
                ],
            }
        )
    )
    user = cert_client(c.tb, c.work / "mallory", "mallory", (), field_manager="mallory")
    entry = {
        "driver": DRIVER_NAME,
        "pool": NODE_A,
        "device": device,
        "conditions": [
            {
                "type": PROGRAMMED,
                "status": "True",
                "reason": "Programmed",
                "message": "trust me",
                "lastTransitionTime": "2026-11-27T06:00:00Z",
            }
        ],
    }

    def forged() -> str:
        try:
            user.patch(
                ResourceClaim.Status,
                "fpga",
                [{"op": "add", "path": "/status/devices", "value": [entry]}],
                namespace=NS,
                patch_type=PatchType.JSON,
            )
        except ApiError as exc:
            return f"{exc.status.code}: {exc.status.message}"
        return "written"

    answers: list[str] = []

    def answer() -> str:  # the claim may be given back and allocated again meanwhile
        if _pool(_claim_status(c)) != NODE_A:
            return ""
        answers.append(forged())
        said = answers[-1]
        return said if said == "written" or "resourceclaims/driver" in said else ""

    said = eventually(answer, 60, "the answer to a forged write", log=lambda: "\n".join(answers))
    # the API server's per-driver check (a field error, so 422 "Forbidden")
    assert said != "written", "a namespace user wrote the binding condition"
    assert "mallory" in said and "kubeacc.io" in said, said
