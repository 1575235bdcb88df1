"""The Helm chart: lint-clean, a schema that refuses wrong values, and install / upgrade /
uninstall on a real cluster with several value sets."""

from __future__ import annotations

import filecmp
import json
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from lightkube import ApiError, Client
from lightkube.generic_resource import create_global_resource
from lightkube.resources.apiextensions_v1 import CustomResourceDefinition
from lightkube.resources.apps_v1 import DaemonSet, Deployment
from lightkube.resources.core_v1 import ConfigMap, Namespace, Secret, ServiceAccount
from lightkube.resources.networking_v1 import NetworkPolicy
from lightkube.resources.rbac_authorization_v1 import ClusterRole, ClusterRoleBinding
from lightkube.resources.resource_v1 import DeviceClass

import kubeacc
from kubeacc.testbed.testbed import Testbed
from tests.testbed.helpers import eventually

from .conftest import CHART, Helm

REPO = CHART.parents[1]
NS = "kubeacc-system"
K8S = "--kube-version=1.36.3"
VAP = create_global_resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicy",
    "validatingadmissionpolicies",
)
VAPB = create_global_resource(
    "admissionregistration.k8s.io",
    "v1",
    "ValidatingAdmissionPolicyBinding",
    "validatingadmissionpolicybindings",
)


def test_chart_files_are_the_deploy_manifests() -> None:
    pairs = [(f"crds/{p.name}", p) for p in (REPO / "deploy" / "crds").glob("*.yaml")]
    pairs += [
        ("rbac/agent.yaml", REPO / "deploy/rbac/agent.yaml"),
        ("rbac/controller.yaml", REPO / "deploy/rbac/controller.yaml"),
        ("rbac/extender.yaml", REPO / "deploy/rbac/extender.yaml"),
        ("agent-node-restriction.yaml", REPO / "deploy/admission/agent-node-restriction.yaml"),
        ("extender-decisions.yaml", REPO / "deploy/admission/extender-decisions.yaml"),
        ("deviceclasses.yaml", REPO / "deploy/dra-deviceclasses.yaml"),
        ("kubeacc-dashboard.json", REPO / "deploy/grafana/kubeacc-dashboard.json"),
    ]
    stale = [c for c, src in pairs if not filecmp.cmp(CHART / "files" / c, src, shallow=False)]
    assert not stale, f"run scripts/sync-chart-files.sh: {stale} differ from deploy/"


def test_chart_version_is_the_package_version() -> None:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    assert chart["appVersion"] == kubeacc.__version__


def test_lint_is_clean(helm: Helm, tmp_path: Path) -> None:
    for i, values in enumerate([{}, DEVICE_PLUGIN_VALUES, MINIMAL_VALUES]):
        f = tmp_path / f"v{i}.yaml"
        f.write_text(yaml.safe_dump(values))
        out = helm("lint", "--strict", str(CHART), "-f", str(f), K8S).stdout
        assert "0 chart(s) failed" in out
        assert "[WARNING]" not in out and "[ERROR]" not in out, out


@pytest.mark.parametrize(
    ("setting", "message"),
    [
        ("modes.gpu=dra2", "at '/modes/gpu': value must be one of 'dra', 'device-plugin'"),
        ("agent.nodeSelectr.a=b", "at '/agent': additional properties 'nodeSelectr' not allowed"),
        ("nvidia.nvml=maybe", "at '/nvidia/nvml': value must be one of 'auto', 'on', 'off'"),
        ("metrics.agentPort=0", "at '/metrics/agentPort': minimum: got 0, want 1"),
        ("agent.stateDir=relative", "at '/agent/stateDir'"),
        ("agent.hostRoot=relative", "at '/agent/hostRoot'"),
        ("logLevel=LOUD", "at '/logLevel'"),
        ("agent.draPublish={tpu}", "at '/agent/draPublish/0'"),
        ("agent.memoryShared={half}", "at '/agent/memoryShared/0'"),
        ("agent.memoryShared={type=tpu}", "at '/agent/memoryShared/0'"),
        ("nvidia.toolsDir=bin", "at '/nvidia/toolsDir'"),
        ("nvidia.driverTools=maybe", "at '/nvidia/driverTools'"),
        ("agent.telemetryInterval=-1", "at '/agent/telemetryInterval'"),
        ("agent.healthTaintHold=0", "at '/agent/healthTaintHold'"),
        ("agent.deviceStatus=maybe", "at '/agent/deviceStatus'"),
        ("agent.fpgaBindingConditions=maybe", "at '/agent/fpgaBindingConditions'"),
        ("agent.deviceMetadata=maybe", "at '/agent/deviceMetadata'"),
        ("cyborg.enabled=true", "at '/cyborg/credentialsSecret'"),
        ("cyborg.eventsPort=70000", "at '/cyborg/eventsPort'"),
        ("cyborg.bindTimeout=0", "at '/cyborg/bindTimeout'"),
        ("cyborg.lifecycleInterval=0", "at '/cyborg/lifecycleInterval'"),
    ],
)
def test_wrong_values_fail(helm: Helm, setting: str, message: str) -> None:
    done = helm("template", "t", str(CHART), K8S, "--set", setting, check=False)
    assert done.returncode != 0
    assert message in done.stderr


def _docs(text: str) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(text) if d]


def test_memory_shared_selectors_reach_the_agent(helm: Helm) -> None:
    out = helm(
        "template",
        "t",
        str(CHART),
        K8S,
        "--set-json",
        'agent.memoryShared=["model=*H100*","pci=0000:1b:00.0","type=xpu"]',
    ).stdout
    (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
    args = ds["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--memory-shared")] == [
        "--memory-shared=model=*H100*",
        "--memory-shared=pci=0000:1b:00.0",
        "--memory-shared=type=xpu",
    ]


def test_dra_publish_reaches_the_agent(helm: Helm) -> None:
    def args(*settings: str) -> list[str]:
        out = helm("template", "t", str(CHART), K8S, *settings).stdout
        (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
        found: list[str] = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        return [a for a in found if a.startswith("--dra-publish")]

    assert args() == []  # the agent's default: every type, no VFs
    assert args("--set-json", 'agent.draPublish=["gpu","nic","vf"]') == [
        "--dra-publish=gpu",
        "--dra-publish=nic",
        "--dra-publish=vf",
    ]


def test_device_status_and_metadata_switches_reach_the_agent(helm: Helm) -> None:
    def args(*settings: str) -> list[str]:
        out = helm("template", "t", str(CHART), K8S, *settings).stdout
        (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
        found: list[str] = ds["spec"]["template"]["spec"]["containers"][0]["args"]
        flags = ("--no-device-status", "--no-device-metadata", "--no-fpga-binding-conditions")
        return [a for a in found if a in flags]

    assert args() == []  # both on by default, as in the agent
    assert args("--set", "agent.deviceStatus=false") == ["--no-device-status"]
    assert args("--set", "agent.deviceMetadata=false") == ["--no-device-metadata"]
    assert args("--set", "agent.deviceStatus=false,agent.deviceMetadata=false") == [
        "--no-device-status",
        "--no-device-metadata",
    ]
    # under Volcano, FPGA bitstreams at prepare (docs/choosing.md, "With Volcano")
    assert args("--set", "agent.fpgaBindingConditions=false") == ["--no-fpga-binding-conditions"]


def test_cyborg_values_reach_the_agent_and_mount_the_secret(helm: Helm) -> None:
    def agent(*settings: str) -> tuple[list[str], list[dict[str, Any]], list[dict[str, Any]]]:
        out = helm("template", "t", str(CHART), K8S, *settings).stdout
        (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
        pod = ds["spec"]["template"]["spec"]
        container = pod["containers"][0]
        args = [a for a in container["args"] if "cyborg" in a or a.startswith("--inventory")]
        mounts = [m for m in container["volumeMounts"] if m["name"] == "cyborg-credentials"]
        volumes = [v for v in pod["volumes"] if v["name"] == "cyborg-credentials"]
        return args, mounts, volumes

    assert agent() == ([], [], [])  # off by default: the host's own devices
    args, mounts, volumes = agent(
        "--set", "cyborg.enabled=true,cyborg.credentialsSecret=os-creds,cyborg.eventsPort=8774"
    )
    assert args == [
        "--inventory=cyborg",
        "--cyborg-credentials=/etc/kubeacc-cyborg/credentials.yaml",
        "--cyborg-bind-timeout=60",
        "--cyborg-events-address=:8774",
    ]
    assert mounts == [
        {"name": "cyborg-credentials", "mountPath": "/etc/kubeacc-cyborg", "readOnly": True}
    ]
    assert volumes[0]["secret"]["secretName"] == "os-creds"


def test_cyborg_values_reach_the_lifecycle_agent_too(helm: Helm) -> None:
    def lifecycle(*settings: str) -> tuple[list[str], list[dict[str, Any]]]:
        out = helm("template", "t", str(CHART), K8S, *settings).stdout
        (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
        (container,) = [
            c for c in ds["spec"]["template"]["spec"]["containers"] if c["name"] == "lifecycle"
        ]
        args = [
            a
            for a in container["args"]
            if "cyborg" in a or a.startswith(("--inventory", "--interval"))
        ]
        mounts = [m for m in container["volumeMounts"] if m["name"] == "cyborg-credentials"]
        return args, mounts

    assert lifecycle() == (["--interval=1"], [])
    args, mounts = lifecycle("--set", "cyborg.enabled=true,cyborg.credentialsSecret=os-creds")
    assert args == [
        "--interval=10",
        "--inventory=cyborg",
        "--cyborg-credentials=/etc/kubeacc-cyborg/credentials.yaml",
    ]
    assert mounts == [
        {"name": "cyborg-credentials", "mountPath": "/etc/kubeacc-cyborg", "readOnly": True}
    ]


def test_host_root_moves_the_host_paths_and_the_device_root(helm: Helm) -> None:
    def agent(*settings: str) -> tuple[list[str], dict[str, str]]:
        out = helm("template", "t", str(CHART), K8S, *settings).stdout
        (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
        spec = ds["spec"]["template"]["spec"]
        paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
        return spec["containers"][0]["args"], paths

    args, paths = agent()
    assert not [a for a in args if a.startswith("--device-root")]
    assert (paths["host-sys"], paths["host-dev"]) == ("/sys", "/dev")
    args, paths = agent("--set", "agent.hostRoot=/srv/node-a/")
    assert "--device-root=/srv/node-a" in args and "--host-root=/host" in args
    assert paths["host-sys"] == "/srv/node-a/sys"
    assert paths["host-dev"] == "/srv/node-a/dev"
    assert paths["host-proc-driver"] == "/srv/node-a/proc/driver"


def _agent_container(
    helm: Helm, *settings: str
) -> tuple[list[str], dict[str, str], dict[str, dict[str, Any]]]:
    """The rendered agent container's args, host paths by volume and mounts by volume."""
    out = helm("template", "t", str(CHART), K8S, *settings).stdout
    (ds,) = [d for d in _docs(out) if d["kind"] == "DaemonSet"]
    spec = ds["spec"]["template"]["spec"]
    paths = {v["name"]: v["hostPath"]["path"] for v in spec["volumes"] if "hostPath" in v}
    mounts = {m["name"]: m for m in spec["containers"][0]["volumeMounts"]}
    return spec["containers"][0]["args"], paths, mounts


def test_device_telemetry_interval_rides_with_metrics(helm: Helm) -> None:
    args, _, _ = _agent_container(helm)
    assert "--telemetry-interval=10" in args
    args, _, _ = _agent_container(helm, "--set", "agent.telemetryInterval=0")
    assert "--telemetry-interval=0" in args
    args, _, _ = _agent_container(helm, "--set", "metrics.enabled=false")
    assert not [a for a in args if a.startswith(("--telemetry", "--metrics"))]


def test_health_taints_are_asked_for_and_ride_with_the_telemetry(helm: Helm) -> None:
    args, _, _ = _agent_container(helm)
    assert not [a for a in args if a.startswith("--health-taint")]
    on = ("--set", "agent.healthTaints=true", "--set", "agent.healthTaintHold=60")
    args, _, _ = _agent_container(helm, *on)
    assert "--health-taints" in args and "--health-taint-hold=60" in args
    args, _, _ = _agent_container(helm, *on, "--set", "metrics.enabled=false")
    assert not [a for a in args if a.startswith("--health-taint")]


def test_driver_tools_are_mounted_from_the_driver_root(helm: Helm) -> None:
    def agent(*settings: str) -> tuple[list[str], dict[str, str], dict[str, dict[str, Any]]]:
        return _agent_container(helm, *settings)

    args, paths, mounts = agent()
    assert "--driver-tools-dir=/run/kubeacc/nvidia-bin" in args
    # One release for x86-64 and Arm64 nodes: the agent picks its own multiarch directory.
    assert "--driver-library-dir=/run/kubeacc/nvidia/{multiarch}" in args
    assert "--nvml-library=/run/kubeacc/nvidia/{multiarch}/libnvidia-ml.so.1" in args
    assert paths["nvidia-lib"] == "/usr/lib"
    assert paths["nvidia-bin"] == "/usr/bin"
    assert mounts["nvidia-bin"] == {
        "name": "nvidia-bin", "mountPath": "/run/kubeacc/nvidia-bin", "readOnly": True
    }  # fmt: skip
    args, paths, _ = agent("--set", "nvidia.driverRoot=/run/nvidia/driver")
    assert paths["nvidia-bin"] == "/run/nvidia/driver/usr/bin"
    assert paths["nvidia-lib"] == "/run/nvidia/driver/usr/lib"
    args, paths, _ = agent("--set", "nvidia.libraryDir=/usr/lib64")  # a layout of its own
    assert "--driver-library-dir=/run/kubeacc/nvidia" in args
    assert "--nvml-library=/run/kubeacc/nvidia/libnvidia-ml.so.1" in args
    assert paths["nvidia-lib"] == "/usr/lib64"
    args, _, mounts = agent("--set", "nvidia.nvml=off")  # tools without the driver's libraries
    assert "--driver-tools-dir=/run/kubeacc/nvidia-bin" in args
    assert not [a for a in args if a.startswith("--driver-library-dir")]
    args, paths, mounts = agent("--set", "nvidia.driverTools=false")
    assert not [a for a in args if a.startswith(("--driver-tools", "--driver-library"))]
    assert "nvidia-bin" not in paths and "nvidia-bin" not in mounts


def test_dashboard_and_config_maps_render(helm: Helm) -> None:
    out = helm(
        "template",
        "t",
        str(CHART),
        K8S,
        "-n",
        NS,
        "--set",
        "metrics.dashboard.enabled=true",
        "--set-json",
        'modes={"fpga":"device-plugin"}',
        "--set-json",
        'devicePlugin.types={"fpga":{"replicas":4,"strategy":"packed"}}',
    ).stdout
    maps = {d["metadata"]["name"]: d for d in _docs(out) if d["kind"] == "ConfigMap"}
    dash = maps["kubeacc-dashboard"]
    assert dash["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert json.loads(dash["data"]["kubeacc-dashboard.json"])["uid"] == "kubeacc-fleet"
    dp = yaml.safe_load(maps["kubeacc-agent-config"]["data"]["device-plugin.yaml"])
    assert dp["types"] == {"fpga": {"replicas": 4, "strategy": "packed"}}


def test_uninstall_hook_runs_kubeacc_cleanup(helm: Helm) -> None:
    out = helm("template", "t", str(CHART), K8S, "-n", NS).stdout
    hooks = [
        d
        for d in _docs(out)
        if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "post-delete"
    ]
    assert sorted(d["kind"] for d in hooks) == [
        "ClusterRole",
        "ClusterRoleBinding",
        "Job",
        "ServiceAccount",
    ]
    (job,) = [d for d in hooks if d["kind"] == "Job"]
    assert job["spec"]["template"]["spec"]["containers"][0]["command"] == ["kubeacc", "cleanup"]


def test_pre_delete_hook_checks_claims_in_use(helm: Helm) -> None:
    out = _docs(helm("template", "t", str(CHART), K8S, "-n", NS).stdout)
    hooks = [
        d for d in out if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "pre-delete"
    ]
    by = {(d["kind"], d["metadata"]["name"]): d for d in hooks}
    job = by[("Job", "kubeacc-uninstall-check")]
    assert job["spec"]["backoffLimit"] == 0  # one refusal stops the uninstall
    pod = job["spec"]["template"]["spec"]
    assert pod["containers"][0]["command"] == ["kubeacc", "uninstall-check"]
    assert pod["serviceAccountName"] == "kubeacc-uninstall-check"
    role = by[("ClusterRole", "kubeacc:uninstall-check")]
    assert role["rules"] == [
        {"apiGroups": ["resource.k8s.io"], "resources": ["resourceclaims"], "verbs": ["list"]}
    ]
    for off in ("cleanup.checkInUse=false", "cleanup.enabled=false"):
        text = helm("template", "t", str(CHART), K8S, "-n", NS, "--set", off).stdout
        assert "kubeacc-uninstall-check" not in text, off


def test_helm_test_runs_kubeacc_status_read_only(helm: Helm) -> None:
    out = _docs(helm("template", "t", str(CHART), K8S, "-n", NS).stdout)
    tests = [d for d in out if d["metadata"].get("annotations", {}).get("helm.sh/hook") == "test"]
    # Only the Pod is a test hook: `helm test --logs` fetches every test hook's logs as a Pod's
    # (the real-runtime chart test runs it).
    (pod,) = tests
    assert (pod["kind"], pod["metadata"]["name"]) == ("Pod", "kubeacc-status-test")
    (container,) = pod["spec"]["containers"]
    assert container["command"] == ["kubeacc", "status"]
    assert container["args"] == [f"--namespace={NS}"]
    assert pod["spec"]["serviceAccountName"] == "kubeacc-status-test"
    assert pod["spec"]["restartPolicy"] == "Never"
    # its identity, in the release, is read-only: nothing but get and list
    identity = [d for d in out if d["metadata"]["name"].startswith("kubeacc-status-test")]
    assert {d["kind"] for d in identity} == {
        "Pod", "ServiceAccount", "ClusterRole", "ClusterRoleBinding", "Role", "RoleBinding"
    }  # fmt: skip
    roles = [d for d in identity if d["kind"] in ("Role", "ClusterRole")]
    assert len(roles) == 2
    assert {v for r in roles for rule in r["rules"] for v in rule["verbs"]} == {"get", "list"}
    off = helm("template", "t", str(CHART), K8S, "-n", NS, "--set", "helmTest.enabled=false")
    assert "kubeacc-status-test" not in off.stdout
    # the args the Pod runs are ones kubeacc status takes
    from tests.cli.clirun import kubeacc

    usage = kubeacc("status", *container["args"], "--help", home=Path("/nonexistent"))
    assert usage.returncode == 0, usage.stderr


# -- on a real cluster ---------------------------------------------------------------------------

DEVICE_PLUGIN_VALUES: dict[str, Any] = {
    "modes": {"gpu": "device-plugin", "nic": "device-plugin"},
    "devicePlugin": {"cdi": True, "types": {"gpu": {"replicas": 2, "perModel": False}}},
    "agent": {
        "nodeSelector": {"kubernetes.io/hostname": "node-a"},
        "tolerations": [{"key": "accelerators", "operator": "Exists", "effect": "NoSchedule"}],
        "discoveryDevices": [{"vendor": "0x1e52", "type": "accelerator", "model": "Example X1"}],
        "rediscoverInterval": 2,
    },
    "logLevel": "DEBUG",
    "nvidia": {"nvml": "on"},
    "extender": {"enabled": True, "replicas": 1},
    "networkPolicy": {
        "enabled": True,
        "extenderFrom": [{"ipBlock": {"cidr": "10.0.0.0/24"}}],
        "metricsFrom": [{"namespaceSelector": {"matchLabels": {"name": "monitoring"}}}],
    },
}
MINIMAL_VALUES: dict[str, Any] = {
    "metrics": {"enabled": False},
    "controller": {"enabled": False},
    "agent": {"lifecycle": {"enabled": False}, "nodeSelector": {"kubeacc.io/none": "x"}},
    "nvidia": {"nvml": "off"},
}


def _host_values(tb: Testbed, tmp: Path) -> dict[str, Any]:
    """Host paths of the test's own (the kubelet creates DirectoryOrCreate paths on the host)."""
    return {
        "agent": {
            "kubeletRoot": str(tb.kubelet.root_dir),
            "cdiDir": str(tmp / "cdi"),
            "stateDir": str(tmp / "state"),
        },
        "bitstreams": {"hostPath": str(tmp / "bitstreams")},
        "nvidia": {"driverRoot": str(tmp / "driver"), "libraryDir": "/lib"},
        # The testbed's runtime runs no processes: a hook Job would never complete. The
        # command the Job runs is tested in tests/agent/test_cleanup.py.
        "cleanup": {"enabled": False},
    }


def _merge(a: dict[str, Any], b: dict[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _values_file(tmp: Path, name: str, values: dict[str, Any]) -> str:
    path = tmp / f"{name}.yaml"
    path.write_text(yaml.safe_dump(values))
    return str(path)


def _agent_args(tb: Testbed, container: str = "agent") -> list[list[str]]:
    """The args of every CreateContainer the kubelet made for the agent pod's ``container``."""
    return [
        list(r.raw.get("config", {}).get("args", []))
        for r in tb.kubelet.container_records(namespace=NS)
        if r.container == container and r.pod.startswith("kubeacc-agent-")
    ]


def _names(client: Client, kind: Any, contains: str = "kubeacc") -> set[str]:
    return {
        o.metadata.name for o in client.list(kind) if o.metadata and contains in o.metadata.name
    }


def _all_exist(helm: Helm, tb: Testbed, tmp: Path) -> list[dict[str, Any]]:
    """Every object of the release's manifest, read back from the API server by kubectl."""
    manifest = helm("get", "manifest", "kubeacc", "-n", NS).stdout
    path = tmp / "manifest.yaml"
    path.write_text(manifest)
    done = subprocess.run(
        [*tb.kubectl(), "get", "-f", str(path), "-o", "name"],
        capture_output=True,
        text=True,
        check=False,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    docs = _docs(manifest)
    assert len(done.stdout.split()) == len(docs)
    return docs


@pytest.mark.cluster
def test_install_upgrade_uninstall(chart_cluster: tuple[Testbed, Helm], tmp_path: Path) -> None:
    tb, helm = chart_cluster
    client = tb.client()
    host = _host_values(tb, tmp_path)

    # 1. Defaults: every object accepted, DRA for every type.
    helm(
        "install",
        "kubeacc",
        str(CHART),
        "-n",
        NS,
        "--create-namespace",
        "-f",
        _values_file(tmp_path, "defaults", host),
    )
    docs = _all_exist(helm, tb, tmp_path)
    kinds = sorted({d["kind"] for d in docs})
    assert kinds == [
        "ClusterRole",
        "ClusterRoleBinding",
        "CustomResourceDefinition",
        "DaemonSet",
        "Deployment",
        "DeviceClass",
        "Role",  # the helm test's read-only identity (Pod kubeacc-status-test)
        "RoleBinding",
        "ServiceAccount",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    ]
    assert len(_names(client, CustomResourceDefinition)) == 3
    assert _names(client, DeviceClass) >= {"gpu.kubeacc.io", "fpga.kubeacc.io", "nic.kubeacc.io"}
    binding = client.get(ClusterRoleBinding, "kubeacc:agent")
    assert {(s.kind, s.namespace) for s in binding.subjects or []} >= {("ServiceAccount", NS)}
    vap = client.get(VAP, "kubeacc-agent-node-restriction")
    assert f"system:serviceaccount:{NS}:kubeacc-agent" in str(vap.to_dict())

    args = eventually(lambda: _agent_args(tb), 90, "the kubelet creating the agent container")[-1]
    assert f"--kubelet-root={tb.kubelet.root_dir}" in args
    assert f"--state-dir={tmp_path / 'state'}" in args
    assert "--metrics-address=:9460" in args
    assert "--nvml-library=/run/kubeacc/nvidia/libnvidia-ml.so.1" in args
    assert not [a for a in args if a.startswith("--device-plugin")]
    lifecycle = eventually(lambda: _agent_args(tb, "lifecycle"), 30, "lifecycle container")[-1]
    assert "--metrics-address=:9462" in lifecycle and "--host-root=/host" in lifecycle
    ds = client.get(DaemonSet, "kubeacc-agent", namespace=NS)
    agent = ds.spec.template.spec.containers[0]
    assert agent.readinessProbe.httpGet.path == "/readyz"
    assert agent.livenessProbe.httpGet.path == "/healthz"
    dep = client.get(Deployment, "kubeacc-controller", namespace=NS)
    assert dep.spec.replicas == 2
    ctl = dep.spec.template.spec.containers[0]
    assert f"--lease-namespace={NS}" in ctl.args
    assert ctl.readinessProbe.httpGet.port == "metrics"

    def upgrade(name: str, values: dict[str, Any]) -> None:
        path = _values_file(tmp_path, name, _merge(host, values))
        helm("upgrade", "kubeacc", str(CHART), "-n", NS, "-f", path)
        _all_exist(helm, tb, tmp_path)

    # 2. Upgrade: GPUs and NICs through the device plugin, admin devices, a node selector,
    # the extender with its TLS Secret, NetworkPolicies.
    upgrade("dp", DEVICE_PLUGIN_VALUES)
    tls = client.get(Secret, "kubeacc-extender-tls", namespace=NS).data or {}
    assert set(tls) == {"ca.crt", "tls.crt", "tls.key", "scheduler.crt", "scheduler.key"}
    upgrade("dp-again", DEVICE_PLUGIN_VALUES)  # the copy kube-scheduler holds stays valid
    assert client.get(Secret, "kubeacc-extender-tls", namespace=NS).data == tls
    policies = {p.metadata.name for p in client.list(NetworkPolicy, namespace=NS)}
    assert policies == {"kubeacc-agent", "kubeacc-controller", "kubeacc-extender"}
    cfg = client.get(ConfigMap, "kubeacc-agent-config", namespace=NS).data or {}
    dp = yaml.safe_load(cfg["device-plugin.yaml"])
    assert dp["types"] == {"gpu": {"replicas": 2, "perModel": False}, "nic": {}}
    assert dp["cdi"] is True
    assert yaml.safe_load(cfg["discovery.yaml"])["devices"][0]["vendor"] == "0x1e52"

    def upgraded() -> list[str] | None:
        return next(
            (
                a
                for a in reversed(_agent_args(tb))
                if "--device-plugin-config=/etc/kubeacc/device-plugin.yaml" in a
            ),
            None,
        )

    args = eventually(upgraded, 120, "the upgraded agent container")
    assert "--discovery-config=/etc/kubeacc/discovery.yaml" in args
    assert "--log-level=DEBUG" in args and "--nvml=on" in args
    assert "--rediscover-interval=2" in args
    spec = client.get(DaemonSet, "kubeacc-agent", namespace=NS).spec.template.spec
    assert spec.nodeSelector == {"kubernetes.io/hostname": "node-a"}
    assert spec.tolerations[0].key == "accelerators"

    # 3. Minimal: no metrics (no probes), no controller, no lifecycle, a selector no node has.
    upgrade("min", MINIMAL_VALUES)
    with pytest.raises(ApiError):
        client.get(Deployment, "kubeacc-controller", namespace=NS)
    ds = client.get(DaemonSet, "kubeacc-agent", namespace=NS)
    (only,) = ds.spec.template.spec.containers
    assert only.readinessProbe is None and "--metrics-address" not in " ".join(only.args)
    eventually(
        lambda: (
            client.get(DaemonSet, "kubeacc-agent", namespace=NS).status.desiredNumberScheduled == 0
        ),
        60,
        "no node matches the selector",
    )

    # 4. Uninstall: nothing of kube-acc is left.
    helm("uninstall", "kubeacc", "-n", NS, "--wait")
    assert not _names(client, CustomResourceDefinition)
    assert not _names(client, ClusterRole) and not _names(client, ClusterRoleBinding)
    assert not _names(client, VAP) and not _names(client, VAPB)
    assert not _names(client, DeviceClass)
    for kind in (DaemonSet, Deployment, ConfigMap, ServiceAccount, Secret, NetworkPolicy):
        assert not {
            o.metadata.name for o in client.list(kind, namespace=NS) if "kubeacc" in o.metadata.name
        }
    client.delete(Namespace, NS)


def test_extender_renders_only_when_enabled(helm: Helm) -> None:
    off = _docs(helm("template", "t", str(CHART), K8S, "-n", NS).stdout)
    # decisions belong to the extender's identity whether it runs or not (docs/security.md)
    policy = "kubeacc-extender-decisions"
    vap = next(d for d in off if d["metadata"]["name"] == policy and d["kind"].endswith("Policy"))
    assert f"system:serviceaccount:{NS}:kubeacc-extender" in str(vap["spec"]["matchConditions"])
    assert not [d for d in off if "extender" in d["metadata"]["name"] and policy not in str(d)]
    on = _docs(
        helm("template", "t", str(CHART), K8S, "-n", NS, "--set", "extender.enabled=true").stdout
    )
    by = {(d["kind"], d["metadata"]["name"]): d for d in on}
    dep = by[("Deployment", "kubeacc-extender")]
    (container,) = dep["spec"]["template"]["spec"]["containers"]
    assert container["command"] == ["kubeacc", "extender"]
    assert f"--lease-namespace={NS}" in container["args"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert ("Service", "kubeacc-extender") in by
    role = by[("Role", "kubeacc:extender-lease")]
    assert role["metadata"]["namespace"] == NS
    binding = by[("ClusterRoleBinding", "kubeacc:extender")]
    assert binding["subjects"] == [
        {"kind": "ServiceAccount", "name": "kubeacc-extender", "namespace": NS}
    ]


def test_units_table_reaches_the_agent_and_the_extender(helm: Helm) -> None:
    from kubeacc.units.table import parse

    base = ["template", "t", str(CHART), K8S, "-n", NS, "--set", "extender.enabled=true"]
    off = _docs(helm(*base).stdout)
    assert not [d for d in off if d["metadata"]["name"] == "kubeacc-units"]
    on = _docs(
        helm(
            *base,
            "--set-json",
            'units={"models": {"A10G": 70}, "preferModels": "H100,A100"}',
        ).stdout
    )
    by = {(d["kind"], d["metadata"]["name"]): d for d in on}
    table = parse(yaml.safe_load(by[("ConfigMap", "kubeacc-units")]["data"]["units.yaml"]))
    assert table.units_for("NVIDIA A10G") == 70 and table.units_for("NVIDIA H100 PCIe") == 756
    assert table.prefer.rank("a100-sxm4-40gb") == 1
    for kind, name, container in (
        ("DaemonSet", "kubeacc-agent", "agent"),
        ("Deployment", "kubeacc-extender", "extender"),
    ):
        spec = by[(kind, name)]["spec"]["template"]["spec"]
        (c,) = [c for c in spec["containers"] if c["name"] == container]
        assert "--units-table=/etc/kubeacc-units/units.yaml" in c["args"]
        assert {"name": "units", "configMap": {"name": "kubeacc-units"}} in spec["volumes"]
    bad = helm(*base, "--set-json", 'units={"models": {"H100": 0}}', check=False)
    assert bad.returncode != 0 and "minimum" in bad.stderr


def test_the_driver_user_space_comes_from_the_driver_root_or_the_toolkit(helm: Helm) -> None:
    def agent(*settings: str) -> tuple[list[str], dict[str, str], dict[str, dict[str, Any]]]:
        return _agent_container(helm, *settings)

    args, paths, mounts = agent("--set", "nvidia.driverRoot=/run/nvidia/driver")
    assert "--driver-user-space=cdi" in args
    assert "--driver-root=/driver-root" in args  # read at /host/driver-root
    assert "--runtime-driver-root=/run/nvidia/driver" in args  # the CDI specs' hostPath
    assert paths["driver-root"] == "/run/nvidia/driver"
    assert mounts["driver-root"]["mountPath"] == "/host/driver-root"
    assert mounts["driver-root"]["readOnly"] is True
    args, paths, mounts = agent("--set", "nvidia.driverUserSpace=toolkit")
    assert "--driver-user-space=toolkit" in args
    assert not [a for a in args if a.startswith(("--driver-root", "--runtime-driver-root"))]
    assert "driver-root" not in paths and "driver-root" not in mounts


def _extender_tls(helm: Helm, *settings: str) -> dict[tuple[str, str], dict[str, Any]]:
    out = helm(
        "template", "t", str(CHART), K8S, "-n", NS, "--set", "extender.enabled=true", *settings
    ).stdout
    return {(d["kind"], d["metadata"]["name"]): d for d in _docs(out)}


def test_the_charts_certificates_let_only_kube_scheduler_in(helm: Helm, tmp_path: Path) -> None:
    """The Secret the chart makes: the extender serves with it, kube-scheduler's certificate
    (checking the extender's name in the Service's DNS) is answered, anything else is not."""
    import base64
    import socket
    import ssl

    from kubeacc.extender.server import ExtenderServer
    from kubeacc.extender.service import Extender
    from kubeacc.extender.state import State
    from kubeacc.netserve.tls import ReloadingContext, TLSFiles

    by = _extender_tls(helm)
    data = by[("Secret", "kubeacc-extender-tls")]["data"]
    for key, value in data.items():
        (tmp_path / key).write_bytes(base64.b64decode(value))
    (container,) = by[("Deployment", "kubeacc-extender")]["spec"]["template"]["spec"]["containers"]
    assert "--client-ca-file=/etc/kubeacc-extender-tls/ca.crt" in container["args"]
    volumes = by[("Deployment", "kubeacc-extender")]["spec"]["template"]["spec"]["volumes"]
    (tls_volume,) = [v for v in volumes if v["name"] == "tls"]
    assert {i["key"] for i in tls_volume["secret"]["items"]} == {"tls.crt", "tls.key", "ca.crt"}
    files = TLSFiles(tmp_path / "tls.crt", tmp_path / "tls.key", tmp_path / "ca.crt")
    server = ExtenderServer(Extender(State()), "127.0.0.1", 0, tls=ReloadingContext(files))
    server.start()

    def get(ctx: ssl.SSLContext) -> int:
        # the name kube-scheduler checks: the Service's
        name = f"kubeacc-extender.{NS}.svc"
        with (
            socket.create_connection(("127.0.0.1", server.port), timeout=10) as raw,
            ctx.wrap_socket(raw, server_hostname=name) as conn,
        ):
            conn.sendall(b"GET /state HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            return int(conn.recv(64).split()[1])

    try:
        scheduler = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        scheduler.load_cert_chain(tmp_path / "scheduler.crt", tmp_path / "scheduler.key")
        assert get(scheduler) == 200
        anonymous = ssl.create_default_context(cafile=str(tmp_path / "ca.crt"))
        with pytest.raises((ssl.SSLError, ConnectionError, IndexError)):
            get(anonymous)
    finally:
        server.stop()


def test_extender_tls_settings(helm: Helm) -> None:
    by = _extender_tls(helm, "--set", "extender.tls.existingSecret=mine")
    assert ("Secret", "kubeacc-extender-tls") not in by
    spec = by[("Deployment", "kubeacc-extender")]["spec"]["template"]["spec"]
    assert [v["secret"]["secretName"] for v in spec["volumes"] if v["name"] == "tls"] == ["mine"]
    by = _extender_tls(helm, "--set", "extender.insecureHTTP=true")
    assert ("Secret", "kubeacc-extender-tls") not in by
    (c,) = by[("Deployment", "kubeacc-extender")]["spec"]["template"]["spec"]["containers"]
    assert "--insecure-http" in c["args"] and not [a for a in c["args"] if "tls" in a]
    assert c["livenessProbe"]["httpGet"]["port"] == "probes"


def test_network_policy_needs_the_schedulers_addresses(helm: Helm) -> None:
    base = ["template", "t", str(CHART), K8S, "-n", NS, "--set", "networkPolicy.enabled=true"]
    off = _docs(helm(*base).stdout)
    policies = {d["metadata"]["name"]: d for d in off if d["kind"] == "NetworkPolicy"}
    assert set(policies) == {"kubeacc-agent", "kubeacc-controller"}
    assert policies["kubeacc-agent"]["spec"]["ingress"] == []  # the node's probes only
    bad = helm(*base, "--set", "extender.enabled=true", check=False)
    assert bad.returncode != 0 and "networkPolicy.extenderFrom must name" in bad.stderr


def _workloads(docs: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """name -> pod spec of the long-running workloads (not hooks)."""
    return {
        d["metadata"]["name"]: d["spec"]["template"]
        for d in docs
        if d["kind"] in ("Deployment", "DaemonSet")
    }


def test_monitors_are_off_by_default_and_scrape_every_metrics_port(helm: Helm) -> None:
    off = _docs(helm("template", "t", str(CHART), K8S, "-n", NS).stdout)
    assert not [d for d in off if d["kind"] in ("PodMonitor", "ServiceMonitor")]
    on = _docs(
        helm(
            "template", "t", str(CHART), K8S, "-n", NS, "--set",
            "extender.enabled=true,metrics.podMonitor.enabled=true,"
            "metrics.serviceMonitor.enabled=true,metrics.serviceMonitor.labels.release=prom",
        ).stdout
    )  # fmt: skip
    by = {(d["kind"], d["metadata"]["name"]): d for d in on}
    pm = by[("PodMonitor", "kubeacc")]["spec"]
    sm = by[("ServiceMonitor", "kubeacc")]
    assert sm["metadata"]["labels"]["release"] == "prom"
    # every named container port that serves /metrics is scraped by both
    ports = {
        p["name"]
        for pod in _workloads(on).values()
        for c in pod["spec"]["containers"]
        for p in c.get("ports", [])
        if p["name"] != "verbs"
    }
    assert ports == {"metrics", "lc-metrics", "probes"}
    assert {e["port"] for e in pm["podMetricsEndpoints"]} == ports
    assert {e["port"] for e in sm["spec"]["endpoints"]} == ports
    services = [
        d for d in on if d["kind"] == "Service" and d["metadata"]["name"].endswith("-metrics")
    ]
    served = {p["name"] for s in services for p in s["spec"]["ports"]}
    assert served == ports and all(s["spec"]["clusterIP"] == "None" for s in services)


def test_every_container_has_a_liveness_probe_and_scrape_annotations(helm: Helm) -> None:
    docs = _docs(
        helm("template", "t", str(CHART), K8S, "-n", NS, "--set", "extender.enabled=true").stdout
    )
    pods = _workloads(docs)
    assert set(pods) == {"kubeacc-agent", "kubeacc-controller", "kubeacc-extender"}
    for name, pod in pods.items():
        for c in pod["spec"]["containers"]:
            assert c["livenessProbe"]["httpGet"]["path"] == "/healthz", (name, c["name"])
        notes = pod["metadata"]["annotations"]
        assert notes["prometheus.io/scrape"] == "true", name
        ports = {p["containerPort"] for c in pod["spec"]["containers"] for p in c.get("ports", [])}
        assert int(notes["prometheus.io/port"]) in ports, name
    agent = pods["kubeacc-agent"]["metadata"]["annotations"]
    assert agent["kubeacc.io/metrics-ports"] == "9460,9462"


def test_extra_env_volumes_and_mounts_reach_every_container(helm: Helm) -> None:
    env = '[{"name":"HTTPS_PROXY","value":"http://proxy:3128"}]'
    vol = '[{"name":"extra","configMap":{"name":"site"}}]'
    mount = '[{"name":"extra","mountPath":"/etc/site","readOnly":true}]'
    args = ["template", "t", str(CHART), K8S, "-n", NS, "--set", "extender.enabled=true"]
    for comp in ("agent", "controller", "extender"):
        args += ["--set-json", f"{comp}.extraEnv={env}", "--set-json", f"{comp}.extraVolumes={vol}"]
        args += ["--set-json", f"{comp}.extraVolumeMounts={mount}"]
    pods = _workloads(_docs(helm(*args).stdout))
    for name, pod in pods.items():
        assert {"name": "extra", "configMap": {"name": "site"}} in pod["spec"]["volumes"], name
        for c in pod["spec"]["containers"]:
            assert {"name": "HTTPS_PROXY", "value": "http://proxy:3128"} in c["env"], c["name"]
            assert {"name": "extra", "mountPath": "/etc/site", "readOnly": True} in c[
                "volumeMounts"
            ], c["name"]
    bad = helm(*args[:6], "--set-json", 'agent.extraVolumeMounts=[{"name":"x"}]', check=False)
    assert bad.returncode != 0 and "mountPath" in bad.stderr


def test_helm_template_needs_kube_version_as_install_md_says(helm: Helm) -> None:
    bare = helm("template", "kubeacc", str(CHART), "-n", NS, check=False)
    assert bare.returncode != 0 and "chart requires kubeVersion: >=1.36.0-0" in bare.stderr
    doc = (REPO / "docs" / "install.md").read_text()
    line = next(x for x in doc.splitlines() if x.startswith("helm template kubeacc"))
    args = line.split()[1 : line.split().index(">")]
    assert "--kube-version" in args
    assert helm(*[str(CHART) if a == "charts/kubeacc" else a for a in args]).returncode == 0
