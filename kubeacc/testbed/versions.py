"""Pinned versions and feature gates of the testbed (one place to change on a version bump).

The testbed runs one Kubernetes release at a time, its *lane*. Each lane is a Go module directory
at the repository root pinning one release, plus the DRA feature gates to set on that release.
``KUBEACC_K8S_VERSION`` picks the lane (``1.37``, the default, or ``1.36``, the compatibility lane
that CI runs a documented subset on, docs/testing.md).
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

#: etcd release the nested module (testbed/etcd/go.mod) pins; one etcd serves every lane.
ETCD_VERSION = "v3.6.16"

#: Environment variable naming the lane (a key of :data:`LANES`).
LANE_ENV = "KUBEACC_K8S_VERSION"


@dataclass(frozen=True)
class Lane:
    """One Kubernetes release the testbed can be built from."""

    #: The release (``k8s.io/kubernetes`` version in the lane's go.mod).
    version: str
    #: The Go module directory at the repository root pinning it.
    module_dir: str
    #: DRA-related gates that exist in the release and are neither GA nor locked (GA gates are
    #: on by default and setting them only produces warnings, or errors once locked).
    feature_gates: Mapping[str, bool]

    @property
    def minor(self) -> str:
        """``1.37`` for ``v1.37.2``."""
        return ".".join(self.version.lstrip("v").split(".")[:2])


#: Checked against pkg/features/kube_features.go of k8s.io/kubernetes v1.37.2:
#: DynamicResourceAllocation, DRAAdminAccess, DRAPrioritizedList, DRAExtendedResource and
#: DRAResourceClaimDeviceStatus are GA and locked; DRADeviceTaints and DRADeviceTaintRules are GA
#: (locked from 1.38), all on by default and left out. DRADeviceBindingConditions,
#: DRAConsumableCapacity, DRAPartitionableDevices and ResourceHealthStatus are beta.
LANE_1_37 = Lane(
    version="v1.37.2",
    module_dir="testbed",
    feature_gates=MappingProxyType(
        {
            "DRAConsumableCapacity": True,
            "DRADeviceBindingConditions": True,
            "DRAPartitionableDevices": True,
            "ResourceHealthStatus": True,
        }
    ),
)

#: Checked against pkg/features/kube_features.go of k8s.io/kubernetes v1.36.3:
#: DynamicResourceAllocation and DRAAdminAccess are GA and locked, DRAPrioritizedList is GA,
#: so they are left out.
LANE_1_36 = Lane(
    version="v1.36.3",
    module_dir="testbed-1.36",
    feature_gates=MappingProxyType(
        {
            "DRAConsumableCapacity": True,
            "DRADeviceTaints": True,
            "DRAExtendedResource": True,
            "DRAPartitionableDevices": True,
            "DRAResourceClaimDeviceStatus": True,
            "ResourceHealthStatus": True,
        }
    ),
)

#: Every lane by its ``KUBEACC_K8S_VERSION`` name.
LANES: Mapping[str, Lane] = MappingProxyType({"1.37": LANE_1_37, "1.36": LANE_1_36})
DEFAULT_LANE = "1.37"


class UnknownLaneError(ValueError):
    """``KUBEACC_K8S_VERSION`` names no lane."""


def lane(name: str | None = None) -> Lane:
    """The lane ``name`` (default: ``$KUBEACC_K8S_VERSION``, else :data:`DEFAULT_LANE`)."""
    key = name if name is not None else os.environ.get(LANE_ENV) or DEFAULT_LANE
    key = key.lstrip("v")
    found = LANES.get(key)
    if found is None:
        raise UnknownLaneError(
            f"{LANE_ENV}={key!r} names no testbed lane; choose one of {', '.join(sorted(LANES))}"
        )
    return found


#: The lane of this process.
LANE = lane()
#: Kubernetes release of this process's lane.
KUBERNETES_VERSION = LANE.version
#: Its feature gates (a copy; callers may derive other sets from it).
FEATURE_GATES: dict[str, bool] = dict(LANE.feature_gates)


def feature_gate_flag(gates: Mapping[str, bool] | None = None) -> str:
    """Render gates as the value of a ``--feature-gates`` flag."""
    g = FEATURE_GATES if gates is None else gates
    return ",".join(f"{k}={'true' if v else 'false'}" for k, v in sorted(g.items()))
