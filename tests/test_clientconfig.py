"""kubeconfig resolution order and merging (the cluster side: tests/cli/test_kubeconfig_cli.py)."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from kubeacc.clientconfig import KubeconfigError, make_client, resolve


def _kubeconfig(path: Path, server: str, context: str = "c", **cluster: str) -> Path:
    path.write_text(
        yaml.safe_dump(
            {
                "clusters": [{"name": context, "cluster": {"server": server, **cluster}}],
                "contexts": [{"name": context, "context": {"cluster": context, "user": "u"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "current-context": context,
            }
        )
    )
    return path


def _server(resolved: object) -> str:
    config = resolved.config.get()  # type: ignore[attr-defined]
    return str(config.cluster.server)


@pytest.fixture
def account(tmp_path: Path) -> Path:
    sa = tmp_path / "sa"
    sa.mkdir()
    (sa / "token").write_text("tok")
    (sa / "namespace").write_text("team-a\n")
    return sa


def test_order_flag_env_in_cluster_home(tmp_path: Path, account: Path) -> None:
    flag = _kubeconfig(tmp_path / "flag", "https://flag:1")
    env_file = _kubeconfig(tmp_path / "env", "https://env:1")
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    _kubeconfig(home / ".kube" / "config", "https://home:1")
    env = {
        "KUBECONFIG": str(env_file),
        "KUBERNETES_SERVICE_HOST": "10.0.0.1",
        "KUBERNETES_SERVICE_PORT": "6443",
        "HOME": str(home),
    }
    assert _server(resolve(flag, environ=env, service_account_dir=account)) == "https://flag:1"
    assert _server(resolve(None, environ=env, service_account_dir=account)) == "https://env:1"
    del env["KUBECONFIG"]
    in_cluster = resolve(None, environ=env, service_account_dir=account)
    assert in_cluster.source == "in-cluster"
    assert _server(in_cluster) == "https://10.0.0.1:6443"
    assert in_cluster.config.get().namespace == "team-a"  # type: ignore[union-attr]
    del env["KUBERNETES_SERVICE_HOST"]
    assert _server(resolve(None, environ=env, service_account_dir=account)) == "https://home:1"
    env["HOME"] = str(tmp_path / "nobody")
    with pytest.raises(KubeconfigError, match="no cluster configured"):
        resolve(None, environ=env, service_account_dir=account)


def test_kubeconfig_list_merges_and_resolves_relative_paths(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    first = _kubeconfig(tmp_path / "a" / "kc", "https://first:1", certificate_authority="x")
    second = _kubeconfig(tmp_path / "b" / "kc", "https://second:1", "d")
    doc = yaml.safe_load(second.read_text())
    doc["clusters"][0]["cluster"]["certificate-authority"] = "ca.crt"
    second.write_text(yaml.safe_dump(doc))
    listed = f"{tmp_path / 'none'}:{first}:{second}"
    merged = resolve(None, environ={"KUBECONFIG": listed}).config
    assert merged.current_context == "c"  # the first file's
    assert set(merged.contexts) == {"c", "d"}
    assert merged.clusters["d"].certificate_auth == str(tmp_path / "b" / "ca.crt")


def test_make_client_names_the_file_and_the_problem(tmp_path: Path) -> None:
    path = _kubeconfig(tmp_path / "kc", "https://x:1")
    doc = yaml.safe_load(path.read_text())
    doc["contexts"][0]["context"]["user"] = "ghost"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(KubeconfigError, match=r"kc: refers to 'ghost', which it does not define"):
        make_client(path)
    cert = _kubeconfig(tmp_path / "cert", "https://x:1", **{"certificate-authority": "no.crt"})
    with pytest.raises(KubeconfigError, match=r"certificate-authority .*/no\.crt: no such file"):
        make_client(cert)
