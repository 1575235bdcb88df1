"""The checks of each node, from what the node agent publishes: its Pod's readiness (when it
runs from the chart), its ResourceSlices or device-plugin resources, and the ``kubeacc.io/``
Node labels that say what discovery found (kubeacc/node/nodelabels.py): devices per type,
whether a kernel driver is bound, the smallest GPU memory (known only where NVML or the driver
answered) and the driver version."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from kubeacc.status.model import Check, failed, passed, skipped

DRIVER = "kubeacc.io"
LABEL_PREFIX = "kubeacc.io/"
#: The agent DaemonSet's Pods (charts/kubeacc/templates/agent.yaml).
AGENT_SELECTOR = {"app.kubernetes.io/name": "kubeacc-agent"}
#: How long the kubelet keeps a driver's slices after the driver is gone (kubelet source,
#: DRA plugin manager's wiping delay).
KUBELET_WIPE_S = 30


@dataclass
class NodeView:
    """What the API server holds about kube-acc on one node."""

    name: str
    labels: dict[str, str] = field(default_factory=dict)
    allocatable: dict[str, str] = field(default_factory=dict)
    slice_devices: int = 0
    slices: int = 0
    agent_pods: list[dict[str, Any]] = field(default_factory=list)

    def counts(self) -> dict[str, int]:
        """Device type -> devices the agent discovered (its ``kubeacc.io/T.count`` labels)."""
        out = {}
        for key, value in self.labels.items():
            if key.startswith(LABEL_PREFIX) and key.endswith(".count") and value.isdigit():
                out[key[len(LABEL_PREFIX) : -len(".count")]] = int(value)
        return out

    def plugin_resources(self) -> dict[str, str]:
        return {
            k: v for k, v in self.allocatable.items() if k.startswith(LABEL_PREFIX) and v != "0"
        }


def views(
    nodes: Iterable[dict[str, Any]],
    slices: Iterable[dict[str, Any]],
    agent_pods: Iterable[dict[str, Any]],
) -> dict[str, NodeView]:
    out: dict[str, NodeView] = {}
    for node in nodes:
        meta, status = node.get("metadata") or {}, node.get("status") or {}
        name = meta.get("name", "")
        out[name] = NodeView(
            name, dict(meta.get("labels") or {}), dict(status.get("allocatable") or {})
        )
    for s in slices:
        spec = s.get("spec") or {}
        view = out.get(spec.get("nodeName") or "")
        if spec.get("driver") == DRIVER and view is not None:
            view.slices += 1
            view.slice_devices += len(spec.get("devices") or [])
    for pod in agent_pods:
        view = out.get((pod.get("spec") or {}).get("nodeName") or "")
        if view is not None:
            view.agent_pods.append(pod)
    return out


def relevant(view: NodeView) -> bool:
    """Is kube-acc expected on this node: an agent Pod, its labels or its slices."""
    return bool(view.agent_pods or view.counts() or view.slices)


def check_node(view: NodeView, namespace: str, pods_anywhere: bool) -> list[Check]:
    return [
        _agent(view, namespace, pods_anywhere),
        _published(view, namespace),
        *_drivers(view),
    ]


def _ready(pod: dict[str, Any]) -> bool:
    conditions = (pod.get("status") or {}).get("conditions") or []
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in conditions)


def _agent(view: NodeView, namespace: str, pods_anywhere: bool) -> Check:
    if not pods_anywhere:
        return skipped(
            "agent",
            view.name,
            f"no kubeacc-agent Pods in namespace {namespace} (agents outside the chart, or "
            "another namespace: -n): judged by what it publishes",
        )
    if not view.agent_pods:
        return failed(
            "agent",
            view.name,
            f"no kubeacc-agent Pod on this node (namespace {namespace})",
            f"kubectl -n {namespace} describe daemonset -l app.kubernetes.io/name=kubeacc-agent: "
            "the agent's nodeSelector, affinity and tolerations must admit the node",
        )
    pod = view.agent_pods[0]
    name = (pod.get("metadata") or {}).get("name", "?")
    if _ready(pod):
        return passed("agent", view.name, f"Pod {name} Ready")
    phase = (pod.get("status") or {}).get("phase", "?")
    return failed(
        "agent",
        view.name,
        f"Pod {name} not Ready ({phase})",
        f"kubectl -n {namespace} logs {name}; kubectl -n {namespace} describe pod {name}",
    )


def _published(view: NodeView, namespace: str) -> Check:
    if view.slice_devices:
        return passed(
            "devices", view.name, f"{view.slice_devices} devices in {view.slices} ResourceSlices"
        )
    plugin = view.plugin_resources()
    if plugin:
        listed = ", ".join(f"{k}={v}" for k, v in sorted(plugin.items()))
        return passed("devices", view.name, f"device plugin: {listed}")
    found = sum(view.counts().values())
    return failed(
        "devices",
        view.name,
        f"the agent discovered {found} devices here, none published (no kubeacc.io "
        "ResourceSlice, no kubeacc.io/ resource allocatable)",
        "the agent is down or not registered with the kubelet (the kubelet removes a "
        f"driver's slices {KUBELET_WIPE_S} s after it goes): kubectl -n {namespace} logs "
        "the agent Pod of this node; check agent.kubeletRoot matches the kubelet's --root-dir",
    )


def _drivers(view: NodeView) -> list[Check]:
    out = []
    for kind, count in sorted(view.counts().items()):
        key = f"{LABEL_PREFIX}{kind}."
        if view.labels.get(key + "driver") != "true":
            out.append(
                failed(
                    "driver",
                    view.name,
                    f"{count} {kind}: not every device has a kernel driver bound",
                    "install or load the vendor's kernel driver; kubeacc discover on the node "
                    "names the device without one",
                )
            )
            continue
        version = view.labels.get(key + "driver-version")
        detail = f"{count} {kind}: driver bound" + (f", version {version}" if version else "")
        if kind == "gpu" and version and key + "memory" not in view.labels:
            out.append(
                failed(
                    "nvml",
                    view.name,
                    f"{count} GPUs, driver {version}, memory unknown: NVML not found",
                    "give the agent the driver's libnvidia-ml.so.1: chart values "
                    "nvidia.driverRoot / nvidia.libraryDir (nvidia.nvml: on logs why it is "
                    "not loaded); without it memory shares and memory selectors match nothing",
                )
            )
            continue
        if kind == "gpu" and key + "memory" in view.labels:
            detail += f", memory {view.labels[key + 'memory']} MiB"
        out.append(passed("driver", view.name, detail))
    return out
