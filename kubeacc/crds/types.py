"""The ``kubeacc.io/v1alpha1`` API types: ``Accelerator``, ``AcceleratorPolicy``,
``AcceleratorOperation``.

These pydantic models are the single source of the CRD schemas: ``kubeacc.crds.manifests``
turns them into apiextensions.k8s.io/v1 structural schemas (validation rules included), and a
test checks that ``deploy/crds/`` holds exactly what they generate. Controllers and agents parse
and build objects with the same models, so the wire format cannot drift from the schema.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic.alias_generators import to_camel

from kubeacc.crds.api import (
    CONTROLLER_ACTIONS,
    Action,
    ConditionStatus,
    EventClass,
    OperationPhase,
    PowerState,
    SharingMode,
    TimeSlice,
    UnhealthyAction,
)
from kubeacc.crds.remediation import Remediation
from kubeacc.crds.rules import extended_resource_problem, operation_spec_problem
from kubeacc.crds.structfield import StructField
from kubeacc.model import Device, DeviceType

#: The enumerations of the operations and conditions live in kubeacc.crds.api (the node
#: daemons use them without pydantic) and are named here as well.
__all__ = [
    "CONTROLLER_ACTIONS",
    "MIG_PROFILE_PATTERN",
    "AcceleratorOperationSpec",
    "AcceleratorOperationStatus",
    "AcceleratorPolicySpec",
    "AcceleratorPolicyStatus",
    "AcceleratorSpec",
    "AcceleratorStatus",
    "Action",
    "Bitstream",
    "Condition",
    "ConditionStatus",
    "Consumer",
    "DetachSpec",
    "DeviceClassTemplate",
    "Dispatch",
    "FaultReport",
    "MigModeSpec",
    "OperationPhase",
    "PolicySelector",
    "PowerSpec",
    "PowerState",
    "ProgramSpec",
    "Sharing",
    "TargetResult",
    "TargetSelector",
    "UnhealthyAction",
]


_DNS_SUBDOMAIN = r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$"
_DNS_LABEL = r"^[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?$"
_SHA256 = r"^[a-f0-9]{64}$"
_LABEL_VALUE = r"^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$"
#: An extended resource name: ``<DNS subdomain>/<name>`` (a qualified name's parts).
_EXTENDED_RESOURCE = (
    r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*"
    r"/[A-Za-z0-9]([-A-Za-z0-9_.]{0,53}[A-Za-z0-9])?$"
)
#: A path relative to the bitstream library: segments that never start with a dot, so neither
#: ``..`` nor hidden files nor absolute paths can be expressed.
_LIBRARY_PATH = r"^[A-Za-z0-9_][A-Za-z0-9_.+-]*(/[A-Za-z0-9_][A-Za-z0-9_.+-]*)*$"


def _rules(*rules: tuple[str, str]) -> dict[str, Any]:
    return {"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in rules]}


class _Model(BaseModel):
    model_config = ConfigDict(
        alias_generator=to_camel, populate_by_name=True, extra="ignore", defer_build=True
    )

    def to_api(self) -> dict[str, Any]:
        return self.model_dump(mode="json", by_alias=True, exclude_none=True)


class Condition(_Model):
    """A metav1.Condition."""

    type: str = Field(max_length=316, pattern=r"^[A-Za-z][A-Za-z0-9_.\-/]*$")
    status: ConditionStatus
    reason: str = Field(max_length=1024, pattern=r"^[A-Za-z]([A-Za-z0-9_,:]*[A-Za-z0-9_])?$")
    message: str = Field(default="", max_length=32768)
    last_transition_time: str = Field(json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(default=None, ge=0)


_CONDITIONS: Any = Field(
    default_factory=list,
    max_length=32,
    json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": ["type"]},
)

# --------------------------------------------------------------------------------------------
# Accelerator (cluster-scoped; one per device; name <node>-<device name>)
# --------------------------------------------------------------------------------------------


class AcceleratorSpec(_Model):
    """Which device this object stands for; written by the node agent, immutable."""

    model_config = ConfigDict(
        json_schema_extra=_rules(
            ("self.node == oldSelf.node", "spec.node is immutable"),
            ("self.deviceName == oldSelf.deviceName", "spec.deviceName is immutable"),
        )
    )

    node: str = Field(max_length=253, pattern=_DNS_SUBDOMAIN, description="Node name")
    device_name: str = Field(
        max_length=63, pattern=_DNS_LABEL, description="Device name as discovery reports it"
    )
    cordoned: bool = Field(
        default=False,
        description="No new allocations (set by a Drain operation, lifted by an Uncordon one; "
        "or by an unhealthy-device policy, lifted when the device is healthy again)",
    )


class Consumer(_Model):
    """Who holds the device: a ResourceClaim, a Pod, a VM."""

    kind: str = Field(min_length=1, max_length=63)
    namespace: str | None = Field(default=None, max_length=63)
    name: str = Field(min_length=1, max_length=253)
    uid: str | None = Field(default=None, max_length=64)
    enforcement: str | None = Field(
        default=None,
        max_length=16,
        description="For a share of the device: how its memory limit holds in the container: "
        "library (kube-acc's preloaded share-limit library), mps (CUDA MPS) or advisory "
        "(not enforced)",
    )


class FaultReport(_Model):
    """The last fault the node agent's telemetry saw appear on the device (written by the node
    agent, read by the controller's remediation; kubeacc.agent.telemetry.faults)."""

    event: EventClass
    xid: int | None = Field(default=None, ge=1, le=999, description="Event Xid: its code")
    detail: str = Field(default="", max_length=256)
    failures: int | None = Field(
        default=None, ge=1, le=100, description="Event HealthFailing: consecutive failed checks"
    )
    time: str = Field(
        json_schema_extra={"format": "date-time"},
        description="When the agent saw it (a new time is a new fault)",
    )


class AcceleratorStatus(_Model):
    device: Annotated[Device, StructField(Device)] | None = Field(
        default=None, description="The device as discovery sees it"
    )
    host_driver: str | None = Field(
        default=None, description="Kernel driver to return to on Detach (recorded by the agent)"
    )
    allocated_to: list[Consumer] = Field(
        default_factory=list,
        max_length=64,
        description="Consumers of the device; written by the allocating component",
        json_schema_extra={"x-kubernetes-list-type": "atomic"},
    )
    last_seen: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    last_fault: FaultReport | None = Field(
        default=None, description="The last device fault the node agent reported"
    )
    conditions: list[Condition] = _CONDITIONS


# --------------------------------------------------------------------------------------------
# AcceleratorPolicy (cluster-scoped)
# --------------------------------------------------------------------------------------------


class PolicySelector(_Model):
    """Which devices a policy governs; empty lists match everything, lists are ORed inside."""

    types: list[DeviceType] = Field(default_factory=list, max_length=8)
    vendors: list[str] = Field(default_factory=list, max_length=16)
    models: list[str] = Field(default_factory=list, max_length=64)


#: A MIG profile name as NVML spells it (``3g.40gb``, ``1g.10gb``); variants (``+me``) are not
#: published, so a policy cannot name them.
MIG_PROFILE_PATTERN = r"^[1-9][0-9]?g\.[1-9][0-9]{0,3}gb$"


class Sharing(_Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "self.mode != 'Exclusive' || !has(self.maxConsumers) || self.maxConsumers == 1",
                "Exclusive sharing allows exactly one consumer (maxConsumers must be 1)",
            ),
            (
                "self.mode == 'MemoryShared' || !has(self.memoryPerConsumerBytes)",
                "memoryPerConsumerBytes is only valid with mode MemoryShared",
            ),
            (
                "self.mode == 'TimeSliced' || !has(self.timeSlice)",
                "timeSlice is only valid with mode TimeSliced",
            ),
            (
                "self.mode == 'MIG' ? has(self.migProfiles) && size(self.migProfiles) > 0 : "
                "!has(self.migProfiles) || size(self.migProfiles) == 0",
                "mode MIG needs a non-empty migProfiles, and migProfiles is only valid with it",
            ),
            (
                "self.mode == 'MIG' || !has(self.migWholeGpu)",
                "migWholeGpu is only valid with mode MIG",
            ),
        )
    )

    mode: SharingMode = SharingMode.EXCLUSIVE
    max_consumers: int = Field(default=1, ge=1, le=64)
    memory_per_consumer_bytes: int | None = Field(default=None, ge=1)
    time_slice: TimeSlice | None = Field(
        default=None, description="TimeSliced GPUs: the time slice set on the device"
    )
    mig_profiles: list[Annotated[str, Field(pattern=MIG_PROFILE_PATTERN, max_length=16)]] = Field(
        default_factory=list,
        max_length=16,
        description="MIG GPUs: the profiles whose partitions are published (e.g. 3g.40gb)",
    )
    mig_whole_gpu: bool | None = Field(
        default=None,
        description="MIG GPUs: also publish the whole GPU (default true)",
    )


class Bitstream(_Model):
    name: str = Field(
        max_length=253,
        pattern=_LIBRARY_PATH,
        description="Path inside the node's bitstream library",
    )
    sha256: str = Field(pattern=_SHA256, description="Lower-case hex SHA-256 of the file")


class DeviceClassTemplate(_Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.extendedResourceName) || "
                "!self.extendedResourceName.contains('kubernetes.io/')",
                "extendedResourceName must not be in a kubernetes.io domain",
            ),
        )
    )

    name: str | None = Field(
        default=None,
        max_length=253,
        pattern=_DNS_SUBDOMAIN,
        description="DeviceClass name; default <policy name>.policy.kubeacc.io",
    )
    extended_resource_name: str | None = Field(
        default=None,
        max_length=253,
        pattern=_EXTENDED_RESOURCE,
        description=(
            "Extended resource a pod's limits may name to get devices of this class through "
            "DRA (e.g. the device plugin's kubeacc.io/gpu-h100-80gb-hbm3); on nodes whose device "
            "plugin advertises the same name, the plugin serves it instead"
        ),
    )

    @field_validator("extended_resource_name")
    @classmethod
    def _not_native(cls, v: str | None) -> str | None:
        problem = extended_resource_problem(v)
        if problem is not None:
            raise ValueError(problem)
        return v


class AcceleratorPolicySpec(_Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            (
                "!has(self.allowedBitstreams) || size(self.allowedBitstreams) == 0 || "
                "!has(self.selector.types) || size(self.selector.types) == 0 || "
                "'fpga' in self.selector.types",
                "allowedBitstreams only make sense for a policy that selects FPGAs",
            ),
            (
                "!has(self.sharing) || !has(self.sharing.mode) || self.sharing.mode != 'MPS' || "
                "(has(self.selector) && has(self.selector.types) && "
                "self.selector.types == ['gpu'])",
                "sharing mode MPS needs a selector of types [gpu] alone",
            ),
            (
                "!has(self.sharing) || !has(self.sharing.mode) || self.sharing.mode != 'MIG' || "
                "(has(self.selector) && has(self.selector.types) && "
                "self.selector.types == ['gpu'])",
                "sharing mode MIG needs a selector of types [gpu] alone",
            ),
            (
                "!has(self.sharing) || !has(self.sharing.timeSlice) || "
                "(has(self.selector) && has(self.selector.types) && "
                "self.selector.types == ['gpu'])",
                "sharing.timeSlice needs a selector of types [gpu] alone",
            ),
        )
    )

    selector: PolicySelector = Field(default_factory=PolicySelector)
    sharing: Sharing = Field(default_factory=Sharing)
    allowed_namespaces: list[str] = Field(
        default_factory=list,
        max_length=256,
        description=(
            "Namespaces that may run operations on these devices; empty: none (only the "
            "controller's admin namespaces may)"
        ),
    )
    allowed_bitstreams: list[Bitstream] = Field(
        default_factory=list,
        max_length=256,
        description="FPGA images that may be programmed (by SHA-256); empty: none",
    )
    on_unhealthy: UnhealthyAction = UnhealthyAction.TAINT
    remediation: Remediation | None = Field(
        default=None,
        description="What the controller does when a device reports a fault (per event class)",
    )
    device_class: DeviceClassTemplate = Field(default_factory=DeviceClassTemplate)


class AcceleratorPolicyStatus(_Model):
    device_class_name: str | None = None
    matched_accelerators: int | None = Field(default=None, ge=0)
    observed_generation: int | None = Field(default=None, ge=0)
    conditions: list[Condition] = _CONDITIONS


# --------------------------------------------------------------------------------------------
# AcceleratorOperation (namespaced: who may change hardware is a namespace-level RBAC question)
# --------------------------------------------------------------------------------------------


class ProgramSpec(_Model):
    bitstream: str = Field(
        max_length=253,
        pattern=_LIBRARY_PATH,
        description="Bitstream file, relative to the node's bitstream library",
    )
    sha256: str = Field(pattern=_SHA256, description="Expected SHA-256 of the file")


class PowerSpec(_Model):
    state: PowerState


class MigModeSpec(_Model):
    enabled: bool = Field(description="MIG mode wanted on the GPU (applied with a GPU reset)")


class DetachSpec(_Model):
    driver: str | None = Field(
        default=None,
        max_length=63,
        pattern=r"^[A-Za-z0-9_-]+$",
        description="Host driver to bind; default: the one recorded at Attach",
    )


class TargetSelector(_Model):
    """Accelerators picked by label instead of by name (``spec.targetSelector``).

    The controller resolves it once, when it first sees the operation: idle devices before
    busy ones, then in name order, at most ``maxTargets``; the names it chose are kept in
    ``status.targets`` and used from then on."""

    match_labels: dict[str, Annotated[str, Field(max_length=63, pattern=_LABEL_VALUE)]] = Field(
        min_length=1,
        max_length=16,
        description=(
            "Labels every target must carry (Accelerators are labelled kubeacc.io/node, "
            "kubeacc.io/type and kubeacc.io/model)"
        ),
    )
    max_targets: int = Field(default=1, ge=1, le=64, description="At most this many targets")


class AcceleratorOperationSpec(_Model):
    model_config = ConfigDict(
        json_schema_extra=_rules(
            ("self == oldSelf", "spec is immutable; create a new operation instead"),
            (
                "has(self.targets) != has(self.targetSelector)",
                "exactly one of spec.targets and spec.targetSelector is required",
            ),
            (
                "self.action == 'Program' ? has(self.program) : !has(self.program)",
                "spec.program is required for action Program and not allowed otherwise",
            ),
            (
                "self.action == 'Power' ? has(self.power) : !has(self.power)",
                "spec.power is required for action Power and not allowed otherwise",
            ),
            (
                "self.action == 'Detach' || !has(self.detach)",
                "spec.detach is only allowed for action Detach",
            ),
            (
                "self.action == 'MigMode' ? has(self.migMode) : !has(self.migMode)",
                "spec.migMode is required for action MigMode and not allowed otherwise",
            ),
            (
                "!has(self.evict) || !self.evict || self.action == 'Drain' || "
                "(has(self.drainFirst) && self.drainFirst)",
                "spec.evict is only allowed for action Drain or with spec.drainFirst",
            ),
        )
    )

    action: Action
    targets: list[Annotated[str, Field(max_length=253, pattern=_DNS_SUBDOMAIN)]] | None = Field(
        default=None,
        min_length=1,
        max_length=64,
        description="Accelerator names (or spec.targetSelector)",
        json_schema_extra={"x-kubernetes-list-type": "set"},
    )
    target_selector: TargetSelector | None = Field(
        default=None, description="Accelerators picked by label (or spec.targets)"
    )
    program: ProgramSpec | None = None
    power: PowerSpec | None = None
    detach: DetachSpec | None = None
    mig_mode: MigModeSpec | None = None
    drain_first: bool = Field(
        default=False,
        description="Cordon the targets and wait until nobody uses them instead of refusing",
    )
    evict: bool | None = Field(
        default=None,
        description="With Drain or drainFirst: taint the targets NoExecute through a "
        "DeviceTaintRule (Kubernetes 1.37) so that their pods are evicted instead of waited for",
    )
    timeout_seconds: int = Field(default=600, ge=1, le=86400)

    @model_validator(mode="after")
    def _one_way_to_name_targets(self) -> AcceleratorOperationSpec:
        problem = operation_spec_problem(self)
        if problem is not None:
            raise ValueError(problem)
        return self


class Dispatch(_Model):
    """A target handed to a node agent (written by the controller)."""

    accelerator: str = Field(max_length=253)
    node: str = Field(max_length=253)
    device_name: str = Field(max_length=63)


class TargetResult(_Model):
    """What the node agent did to one target (written by that node's agent)."""

    accelerator: str = Field(max_length=253)
    node: str = Field(max_length=253)
    phase: OperationPhase
    reason: str = Field(default="", max_length=128)
    message: str = Field(default="", max_length=4096)
    afu_id: str | None = Field(default=None, max_length=64)
    driver: str | None = Field(default=None, max_length=63)
    finished_at: str | None = Field(default=None, json_schema_extra={"format": "date-time"})


def _map_list(key: str) -> Any:
    return Field(
        default_factory=list,
        max_length=64,
        json_schema_extra={"x-kubernetes-list-type": "map", "x-kubernetes-list-map-keys": [key]},
    )


class AcceleratorOperationStatus(_Model):
    phase: OperationPhase | None = None
    message: str | None = Field(default=None, max_length=4096)
    start_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    completion_time: str | None = Field(default=None, json_schema_extra={"format": "date-time"})
    observed_generation: int | None = Field(default=None, ge=0)
    targets: list[Annotated[str, Field(max_length=253)]] = Field(
        default_factory=list,
        max_length=64,
        description=(
            "The Accelerators the operation acts on, fixed at its first sight (spec.targets, or "
            "what spec.targetSelector matched then)"
        ),
    )
    dispatch: list[Dispatch] = _map_list("accelerator")
    results: list[TargetResult] = _map_list("accelerator")
    conditions: list[Condition] = _CONDITIONS
