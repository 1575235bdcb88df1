"""Pinned versions and feature gates of the testbed (one place to change on a version bump)."""

from __future__ import annotations

#: Kubernetes release the testbed's Go module (testbed/go.mod) pins.
KUBERNETES_VERSION = "v1.36.3"
#: etcd release the nested module (testbed/etcd/go.mod) pins.
ETCD_VERSION = "v3.6.16"

#: DRA-related feature gates that exist in the pinned release and are neither GA nor locked.
#: Checked against pkg/features/kube_features.go of k8s.io/kubernetes v1.36.3:
#: DynamicResourceAllocation and DRAAdminAccess are GA and locked, DRAPrioritizedList is GA,
#: so they are left out (setting them only produces warnings or errors).
FEATURE_GATES: dict[str, bool] = {
    "DRAConsumableCapacity": True,
    "DRADeviceTaints": True,
    "DRAExtendedResource": True,
    "DRAPartitionableDevices": True,
    "DRAResourceClaimDeviceStatus": True,
    "ResourceHealthStatus": True,
}


def feature_gate_flag(gates: dict[str, bool] | None = None) -> str:
    """Render gates as the value of a ``--feature-gates`` flag."""
    g = FEATURE_GATES if gates is None else gates
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(g.items()))
