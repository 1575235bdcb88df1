"""extender.scheduler: a second kube-scheduler with the extender in its profile, for clusters
whose control plane cannot be edited. Rendered with helm template, the configuration checked by
the real kube-scheduler, and that kube-scheduler run on the testbed with it."""

from __future__ import annotations

import base64
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import Client
from lightkube.codecs import from_dict
from lightkube.resources.core_v1 import Pod

from kubeacc.testbed.build import ensure_built
from kubeacc.testbed.testbed import Testbed
from tests.testbed.helpers import eventually

from .conftest import CHART, Helm

NS = "kubeacc-system"
K8S = "--kube-version=1.36.3"
ON = ("--set", "extender.enabled=true", "--set", "extender.scheduler.enabled=true")


def _render(helm: Helm, *args: str, namespace: str = NS) -> dict[tuple[str, str], Any]:
    out = helm("template", "t", str(CHART), K8S, "-n", namespace, *args).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(out) if d}


def _config(docs: dict[tuple[str, str], Any]) -> dict[str, Any]:
    cfg: dict[str, Any] = yaml.safe_load(
        docs[("ConfigMap", "kubeacc-scheduler")]["data"]["config.yaml"]
    )
    return cfg


def test_renders_only_with_the_extender_and_the_option(helm: Helm) -> None:
    names = [n for _, n in _render(helm)]
    assert not [n for n in names if n.startswith("kubeacc-scheduler")]
    only = _render(helm, "--set", "extender.scheduler.enabled=true")  # no extender: nothing
    assert not [n for _, n in only if n.startswith("kubeacc-scheduler")]
    assert ("Deployment", "kubeacc-scheduler") in _render(helm, *ON)


def test_profile_calls_the_release_namespace_extender_with_its_client_certificate(
    helm: Helm,
) -> None:
    docs = _render(helm, *ON)
    cfg = _config(docs)
    assert [p["schedulerName"] for p in cfg["profiles"]] == ["kubeacc-scheduler"]
    assert cfg["leaderElection"] == {
        "leaderElect": True,
        "resourceNamespace": NS,
        "resourceName": "kubeacc-scheduler",
    }
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == f"https://kubeacc-extender.{NS}.svc:8888"
    assert ext["enableHTTPS"] and ext["nodeCacheCapable"] and ext["bindVerb"] == "bind"
    assert {r["name"] for r in ext["managedResources"]} >= {
        "kubeacc.io/gpu",
        "kubeacc.io/gpu-memory",
    }
    dep = docs[("Deployment", "kubeacc-scheduler")]
    pod = dep["spec"]["template"]["spec"]
    (c,) = pod["containers"]
    assert c["image"] == "registry.k8s.io/kube-scheduler:v1.36.3"  # the cluster's version
    assert c["livenessProbe"]["httpGet"]["path"] == "/livez"
    mounts = {m["name"]: m["mountPath"] for m in c["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["tls"]["secret"]["secretName"] == "kubeacc-extender-tls"
    # the files the configuration names are keys of that Secret (the chart makes them)
    secret = docs[("Secret", "kubeacc-extender-tls")]
    for key in ("certFile", "keyFile", "caFile"):
        path = Path(ext["tlsConfig"][key])
        assert str(path.parent) == mounts["tls"] and path.name in secret["data"], key
    assert c["command"] == ["kube-scheduler", f"--config={mounts['config']}/config.yaml"]
    # its own Lease: system:kube-scheduler updates only the one named kube-scheduler
    role = docs[("Role", "kubeacc-scheduler")]
    assert {"kubeacc-scheduler"} == {n for r in role["rules"] for n in r.get("resourceNames", [])}
    bound = {d["roleRef"]["name"] for (k, _), d in docs.items() if k == "ClusterRoleBinding"}
    assert {"system:kube-scheduler", "system:volume-scheduler"} <= bound


def test_values_change_name_tag_weight_and_plain_http(helm: Helm) -> None:
    docs = _render(
        helm,
        *ON,
        "--set",
        "extender.scheduler.schedulerName=gpu-sched",
        "--set",
        "extender.scheduler.image.tag=v1.36.1",
        "--set",
        "extender.scheduler.weight=5",
        "--set",
        "extender.insecureHTTP=true",
    )
    cfg = _config(docs)
    assert cfg["profiles"][0]["schedulerName"] == "gpu-sched"
    assert cfg["leaderElection"]["resourceName"] == "gpu-sched"
    (ext,) = cfg["extenders"]
    assert ext["urlPrefix"] == f"http://kubeacc-extender.{NS}.svc:8888"
    assert not ext["enableHTTPS"] and "tlsConfig" not in ext and ext["weight"] == 5
    pod = docs[("Deployment", "kubeacc-scheduler")]["spec"]["template"]["spec"]
    assert pod["containers"][0]["image"].endswith(":v1.36.1")
    assert "tls" not in {v["name"] for v in pod["volumes"]}
    base = _render(helm, *ON)[("Deployment", "kubeacc-scheduler")]
    hash_of = "kubeacc.io/config-hash"
    assert (
        base["spec"]["template"]["metadata"]["annotations"][hash_of]
        != docs[("Deployment", "kubeacc-scheduler")]["spec"]["template"]["metadata"]["annotations"][
            hash_of
        ]
    ), "a changed configuration rolls the scheduler"
    bad = helm(
        "template", "t", str(CHART), K8S, *ON, "--set", "extender.scheduler.weight=0", check=False
    )
    assert bad.returncode != 0 and "weight" in bad.stderr


def _with_kubeconfig(cfg: dict[str, Any], kubeconfig: Path, dest: Path) -> Path:
    cfg = {**cfg, "clientConnection": {"kubeconfig": str(kubeconfig)}}
    dest.write_text(yaml.safe_dump(cfg))
    return dest


def test_kube_scheduler_accepts_the_configuration(helm: Helm, tmp_path: Path) -> None:
    """The real kube-scheduler validates the rendered file and loads the chart's certificates
    (--write-config-to: load, default, validate, build the extenders, write, exit); a weight it
    refuses shows the check is real."""
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "c", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "c",
            }
        )
    )
    binary = ensure_built() / "kube-scheduler"
    docs = _render(helm, *ON)
    cfg = _config(docs)
    # The Secret's files where the Pod would mount them (kube-scheduler loads them at start).
    tls = tmp_path / "tls"
    tls.mkdir()
    for key, value in docs[("Secret", "kubeacc-extender-tls")]["data"].items():
        (tls / key).write_bytes(base64.b64decode(value))
    names = cfg["extenders"][0]["tlsConfig"]
    for key, file in names.items():
        names[key] = str(tls / Path(file).name)

    def check(c: dict[str, Any]) -> subprocess.CompletedProcess[str]:
        path = _with_kubeconfig(c, kubeconfig, tmp_path / "config.yaml")
        written = tmp_path / "written.yaml"
        written.unlink(missing_ok=True)
        argv = [str(binary), f"--config={path}", f"--write-config-to={written}"]
        return subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)

    ok = check(cfg)
    assert ok.returncode == 0, ok.stderr[-2000:]
    written = yaml.safe_load((tmp_path / "written.yaml").read_text())
    assert [p["schedulerName"] for p in written["profiles"]] == ["kubeacc-scheduler"]
    assert written["extenders"][0]["urlPrefix"] == f"https://kubeacc-extender.{NS}.svc:8888"
    cfg["extenders"][0]["weight"] = 0
    bad = check(cfg)
    assert bad.returncode != 0 and "extenders[0].weight" in bad.stderr


@pytest.fixture
def second_scheduler(testbed: Testbed, helm: Helm, namespace: str, tmp_path: Path) -> Iterator[str]:
    """The rendered configuration run by the testbed's kube-scheduler (admin credentials, the
    Lease in ``namespace``); yields the profile's scheduler name."""
    cfg = _config(_render(helm, *ON, "--set", "extender.insecureHTTP=true", namespace=namespace))
    path = _with_kubeconfig(cfg, testbed.kubeconfig, tmp_path / "config.yaml")
    log = (tmp_path / "kube-scheduler.log").open("w")
    proc = subprocess.Popen(
        [str(testbed.bin_dir / "kube-scheduler"), f"--config={path}", "--secure-port=0"],
        stdout=log,
        stderr=subprocess.STDOUT,
    )
    try:
        yield str(cfg["profiles"][0]["schedulerName"])
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()


@pytest.mark.cluster
def test_pods_that_name_the_profile_are_scheduled_by_it(
    testbed: Testbed, kube_client: Client, namespace: str, second_scheduler: str
) -> None:
    def pod(name: str, scheduler: str) -> dict[str, Any]:
        return {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {
                "schedulerName": scheduler,
                "containers": [{"name": "c", "image": "x"}],
            },
        }

    kube_client.create(from_dict(pod("by-profile", second_scheduler)))
    kube_client.create(from_dict(pod("by-nobody", "no-such-scheduler")))

    def bound() -> str | None:
        got = kube_client.get(Pod, "by-profile", namespace=namespace)
        return got.spec.nodeName if got.spec else None

    node = eventually(bound, 90, "the pod bound by the chart's scheduler profile")
    assert node == testbed.node_name
    time.sleep(2)  # a pod that names another scheduler is left alone
    other = kube_client.get(Pod, "by-nobody", namespace=namespace)
    assert other.spec is not None and other.spec.nodeName is None
    for name in ("by-profile", "by-nobody"):
        kube_client.delete(Pod, name, namespace=namespace, grace_period=0)


def test_network_policy_admits_the_charts_own_scheduler(helm: Helm) -> None:
    docs = _render(helm, *ON, "--set", "networkPolicy.enabled=true")
    policy = docs[("NetworkPolicy", "kubeacc-extender")]
    (rule,) = policy["spec"]["ingress"]
    assert rule["from"] == [
        {
            "podSelector": {
                "matchLabels": {
                    "app.kubernetes.io/name": "kubeacc-scheduler",
                    "app.kubernetes.io/instance": "t",
                }
            }
        }
    ]
    assert rule["ports"] == [{"port": 8888, "protocol": "TCP"}]
    # without it, kube-scheduler's addresses must still be named
    plain = ("--set", "extender.enabled=true", "--set", "networkPolicy.enabled=true")
    res = helm("template", "t", str(CHART), K8S, *plain, check=False)
    assert res.returncode != 0 and "networkPolicy.extenderFrom must name" in res.stderr
