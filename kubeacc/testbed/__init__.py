"""A real Kubernetes cluster for tests, built from the pinned upstream Go modules.

``Testbed.start()`` runs etcd, kube-apiserver, kube-scheduler, kube-controller-manager and a real
kubelet (on the upstream in-memory CRI runtime, or on containerd + runc with
``KubeletOptions(runtime="containerd")``) on loopback ports; see docs/testing.md.
"""

from kubeacc.testbed.build import BuildError, ensure_built
from kubeacc.testbed.kubelet import Kubelet, KubeletOptions
from kubeacc.testbed.records import ContainerRecord
from kubeacc.testbed.testbed import Testbed
from kubeacc.testbed.versions import ETCD_VERSION, FEATURE_GATES, KUBERNETES_VERSION

__all__ = [
    "ETCD_VERSION",
    "FEATURE_GATES",
    "KUBERNETES_VERSION",
    "BuildError",
    "ContainerRecord",
    "Kubelet",
    "KubeletOptions",
    "Testbed",
    "ensure_built",
]
