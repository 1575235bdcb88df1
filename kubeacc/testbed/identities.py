"""API clients that authenticate as node agents would: client certificates issued by the
testbed CA, and service-account tokens the API server issues (bound to a pod or a Node, or not
bound at all). Used by the tests and the benchmark of the agents' least privilege."""

from __future__ import annotations

import hashlib
import subprocess
from pathlib import Path

import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.config.kubeconfig import KubeConfig

from kubeacc.crds.deploy import apply_manifest, manifests
from kubeacc.testbed.kubeconfig import write_kubeconfig
from kubeacc.testbed.testbed import Testbed

#: The DaemonSet's service account (deploy/agent.yaml).
AGENT_SA_NAMESPACE = "kube-system"
AGENT_SA = "kubeacc-agent"


def install_agent_access(client: Client) -> None:
    """What deploy/ gives node agents: RBAC, the admission policy, the service account."""
    apply_manifest(client, "rbac/agent.yaml")
    apply_manifest(client, "admission/agent-node-restriction.yaml")
    for doc in manifests("agent.yaml"):
        if doc["kind"] == "ServiceAccount":
            client.apply(from_dict(doc), field_manager="kubeacc", force=True)


def _stem(*parts: str) -> str:
    return "id-" + hashlib.sha256("\0".join(parts).encode()).hexdigest()[:16]


def cert_kubeconfig(testbed: Testbed, tmp: Path, user: str, groups: tuple[str, ...]) -> Path:
    """A kubeconfig authenticating with a certificate ``CN=<user>, O=<groups>``."""
    pki = testbed.control_plane.pki
    assert pki is not None
    stem = _stem(user, *groups)
    pair = pki.ca.issue(stem, user, organizations=groups, client=True)
    return write_kubeconfig(
        tmp / f"{stem}.kubeconfig", testbed.server, pki.ca.cert_path, pair, stem
    )


def cert_client(
    testbed: Testbed, tmp: Path, user: str, groups: tuple[str, ...], field_manager: str
) -> Client:
    """A client authenticating with a certificate ``CN=<user>, O=<groups>``."""
    kc = cert_kubeconfig(testbed, tmp, user, groups)
    return Client(KubeConfig.from_file(kc), field_manager=field_manager)


def agent_kubeconfig(testbed: Testbed, node: str, tmp: Path) -> Path:
    """A kubeconfig with node ``node``'s agent certificate (deploy/rbac/agent.yaml)."""
    return cert_kubeconfig(testbed, tmp, f"system:kubeacc:agent:{node}", ("kubeacc:agents",))


def agent_cert_client(testbed: Testbed, node: str, tmp: Path) -> Client:
    """Node ``node``'s agent as deploy/rbac/agent.yaml describes its certificate."""
    return cert_client(
        testbed,
        tmp,
        f"system:kubeacc:agent:{node}",
        ("kubeacc:agents",),
        field_manager=f"kubeacc-agent-{node}",
    )


def token_client(
    testbed: Testbed,
    tmp: Path,
    *,
    namespace: str = AGENT_SA_NAMESPACE,
    account: str = AGENT_SA,
    bound_kind: str | None = None,
    bound_name: str | None = None,
    field_manager: str = "kubeacc-agent",
) -> Client:
    """A client with a token of ``namespace/account`` (``kubectl create token``), bound to
    the pod or Node ``bound_kind``/``bound_name`` when given."""
    bound = [f"--bound-object-kind={bound_kind}", f"--bound-object-name={bound_name}"]
    token = subprocess.run(
        [
            *testbed.kubectl(),
            "create",
            "token",
            account,
            "-n",
            namespace,
            *(bound if bound_kind else []),
        ],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()
    pki = testbed.control_plane.pki
    assert pki is not None
    kc = tmp / f"{_stem(namespace, account, bound_kind or '', bound_name or '')}.kubeconfig"
    kc.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [
                    {
                        "name": "tb",
                        "cluster": {
                            "server": testbed.server,
                            "certificate-authority": str(pki.ca.cert_path),
                        },
                    }
                ],
                "users": [{"name": "sa", "user": {"token": token}}],
                "contexts": [{"name": "sa", "context": {"cluster": "tb", "user": "sa"}}],
                "current-context": "sa",
            }
        )
    )
    kc.chmod(0o600)
    return Client(KubeConfig.from_file(kc), field_manager=field_manager)
