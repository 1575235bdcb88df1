"""Which cluster ``kubeacc`` talks to, resolved as kubectl does, checked on the real testbed:
``--kubeconfig``, then ``$KUBECONFIG`` (a merged list), then the pod's service account, then
``~/.kube/config``; and TLS, authentication and authorization failures in one line."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube.generic_resource import create_global_resource

from kubeacc.clientconfig import resolve
from kubeacc.testbed.certs import CertificateAuthority
from kubeacc.testbed.testbed import Testbed
from tests.cli.clirun import assert_one_line_error, kubeacc
from tests.cli.test_errors_cli import kubeconfig_doc

pytestmark = pytest.mark.cluster

SelfSubjectReview = create_global_resource(
    "authentication.k8s.io", "v1", "SelfSubjectReview", "selfsubjectreviews"
)


def _plan_json(result: subprocess.CompletedProcess[str]) -> list[dict[str, Any]]:
    assert result.returncode == 0, result.stderr
    assert "Traceback" not in result.stderr
    placements = json.loads(result.stdout)
    assert isinstance(placements, list)
    return placements


def test_plan_honours_KUBECONFIG(testbed: Testbed, namespace: str, tmp_path: Path) -> None:
    result = kubeacc(
        "plan", "--namespace", namespace, "-o", "json", home=tmp_path,
        KUBECONFIG=str(testbed.kubeconfig),
    )  # fmt: skip
    assert _plan_json(result) == []


def test_KUBECONFIG_list_is_merged_first_wins(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    # Missing files are skipped; the first file picks the current context "testbed", which
    # only the testbed's own kubeconfig defines...
    first = kubeconfig_doc("https://127.0.0.1:1", cluster="c")
    first["current-context"] = "testbed"
    (tmp_path / "first").write_text(yaml.safe_dump(first))
    listed = f"{tmp_path / 'missing'}:{tmp_path / 'first'}:{testbed.kubeconfig}"
    result = kubeacc(
        "plan", "--namespace", namespace, "-o", "json", home=tmp_path, KUBECONFIG=listed
    )
    assert _plan_json(result) == []
    # ...and a context the first file defines wins over the second's.
    first["contexts"] = [{"name": "testbed", "context": {"cluster": "c", "user": "u"}}]
    (tmp_path / "first").write_text(yaml.safe_dump(first))
    result = kubeacc("plan", "-o", "json", home=tmp_path, KUBECONFIG=listed)
    assert_one_line_error(result, 1, "cannot reach the API server https://127.0.0.1:1")


def test_home_kube_config_is_the_last_resort(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    (tmp_path / ".kube").mkdir()
    shutil.copy(testbed.kubeconfig, tmp_path / ".kube" / "config")
    result = kubeacc("plan", "--namespace", namespace, "-o", "json", home=tmp_path)
    assert _plan_json(result) == []


def test_flag_beats_KUBECONFIG(testbed: Testbed, namespace: str, tmp_path: Path) -> None:
    (tmp_path / "bad").write_text("clusters: [\n")
    result = kubeacc(
        "plan", "--kubeconfig", str(testbed.kubeconfig), "--namespace", namespace, "-o", "json",
        home=tmp_path, KUBECONFIG=str(tmp_path / "bad"),
    )  # fmt: skip
    assert _plan_json(result) == []


def _token(testbed: Testbed, namespace: str, account: str) -> str:
    subprocess.run(
        [*testbed.kubectl(), "create", "serviceaccount", account, "-n", namespace],
        check=True,
        capture_output=True,
    )
    return subprocess.run(
        [*testbed.kubectl(), "create", "token", account, "-n", namespace],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.strip()


def test_in_cluster_service_account(testbed: Testbed, namespace: str, tmp_path: Path) -> None:
    """A pod's mounted service account (token, ca.crt, namespace) and the service env vars."""
    account = tmp_path / "serviceaccount"
    account.mkdir()
    (account / "token").write_text(_token(testbed, namespace, "incluster"))
    pki = testbed.control_plane.pki
    assert pki is not None
    shutil.copy(pki.ca.cert_path, account / "ca.crt")
    (account / "namespace").write_text(namespace)
    host, port = testbed.server.removeprefix("https://").rsplit(":", 1)
    env = {"KUBERNETES_SERVICE_HOST": host, "KUBERNETES_SERVICE_PORT": port}
    resolved = resolve(None, environ=env, service_account_dir=account)
    assert resolved.source == "in-cluster"
    # $KUBECONFIG, when set, comes first (kubectl's order).
    assert resolve(None, environ={**env, "KUBECONFIG": str(testbed.kubeconfig)}).source == (
        f"$KUBECONFIG={testbed.kubeconfig}"
    )
    from lightkube import Client

    client = Client(resolved.config)
    review = client.create(SelfSubjectReview({"apiVersion": "authentication.k8s.io/v1"}))
    user = review["status"]["userInfo"]["username"]
    assert user == f"system:serviceaccount:{namespace}:incluster"
    assert client.namespace == namespace


def _token_kubeconfig(testbed: Testbed, tmp: Path, token: str, ca: Path) -> str:
    doc = kubeconfig_doc(testbed.server, token=token)
    doc["clusters"][0]["cluster"]["certificate-authority"] = str(ca)  # type: ignore[index]
    path = tmp / f"kc-{len(list(tmp.iterdir()))}"
    path.write_text(yaml.safe_dump(doc))
    return str(path)


def test_tls_unauthorized_and_forbidden_are_one_line(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    pki = testbed.control_plane.pki
    assert pki is not None
    foreign = CertificateAuthority(tmp_path / "foreign-ca", name="not-the-cluster-ca")
    kc = _token_kubeconfig(testbed, tmp_path, "whatever", foreign.cert_path)
    result = kubeacc("plan", "--kubeconfig", kc, home=tmp_path)
    assert_one_line_error(result, 1, "TLS", testbed.server, "certificate-authority")

    kc = _token_kubeconfig(testbed, tmp_path, "not-a-token", pki.ca.cert_path)
    result = kubeacc("plan", "--kubeconfig", kc, home=tmp_path)
    assert_one_line_error(result, 1, "unauthorized")
    result = kubeacc("status", "--kubeconfig", kc, home=tmp_path)
    assert_one_line_error(result, 1, "unauthorized")

    token = _token(testbed, namespace, "no-rights")
    kc = _token_kubeconfig(testbed, tmp_path, token, pki.ca.cert_path)
    result = kubeacc("plan", "--kubeconfig", kc, home=tmp_path)
    assert_one_line_error(result, 1, "forbidden", f"system:serviceaccount:{namespace}:no-rights")
    result = kubeacc("install-classes", "--kubeconfig", kc, home=tmp_path)
    assert_one_line_error(result, 1, "forbidden", "deviceclasses")
    result = kubeacc("status", "--kubeconfig", kc, home=tmp_path)
    assert_one_line_error(result, 1, "forbidden", f"system:serviceaccount:{namespace}:no-rights")


def test_context_flag_beats_current_context(
    testbed: Testbed, namespace: str, tmp_path: Path
) -> None:
    # One file: current-context "c" points at nothing; "testbed" (from the testbed's own
    # kubeconfig, merged in) is the real cluster. -n is --namespace.
    first = kubeconfig_doc("https://127.0.0.1:1", cluster="c")
    (tmp_path / "first").write_text(yaml.safe_dump(first))
    listed = f"{tmp_path / 'first'}:{testbed.kubeconfig}"
    current = kubeacc("plan", "-n", namespace, "-o", "json", home=tmp_path, KUBECONFIG=listed)
    assert_one_line_error(current, 1, "cannot reach the API server https://127.0.0.1:1")
    chosen = kubeacc(
        "plan", "--context", "testbed", "-n", namespace, "-o", "json",
        home=tmp_path, KUBECONFIG=listed,
    )  # fmt: skip
    assert _plan_json(chosen) == []
