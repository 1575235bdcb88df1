"""The names and enumerations of the ``kubeacc.io/v1alpha1`` API that the node agent uses,
and the one remediation setting it reads.

They live apart from the pydantic API types (:mod:`kubeacc.crds.types`, the source of the CRD
schemas, which use them) so that a node daemon can name the API's group, labels and modes
without importing pydantic (docs/dependencies.md).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from enum import StrEnum
from typing import Any

GROUP = "kubeacc.io"
VERSION = "v1alpha1"
API_VERSION = f"{GROUP}/{VERSION}"

#: Label on objects a policy generates (DeviceClasses) naming the policy.
POLICY_LABEL = "kubeacc.io/policy"
#: Label on Accelerators: the node they live on (list by node with a label selector).
NODE_LABEL = "kubeacc.io/node"
#: Labels on Accelerators: the device type, and the model as a label value (other characters
#: become ``-``), so that an operation's ``spec.targetSelector`` can pick devices by kind.
TYPE_LABEL = "kubeacc.io/type"
MODEL_LABEL = "kubeacc.io/model"
#: Suffix of the DeviceClass a policy generates when it names none: ``<policy>.policy.kubeacc.io``.
POLICY_CLASS_SUFFIX = ".policy.kubeacc.io"


class SharingMode(StrEnum):
    #: Whole devices, one claim each.
    EXCLUSIVE = "Exclusive"
    #: GPUs: compute mode DEFAULT and the time slice applied on the device; a claim can be
    #: shared by several pods.
    TIME_SLICED = "TimeSliced"
    #: Published as memory-shared: several claims each take a part of a device's memory.
    MEMORY_SHARED = "MemoryShared"
    #: GPUs: memory-shared, and served by the GPU's CUDA MPS control daemon.
    MPS = "MPS"
    #: GPUs in MIG mode: the partitions of the profiles in ``migProfiles`` (and the whole GPU
    #: unless ``migWholeGpu`` is false) are published; the class selects those partitions.
    MIG = "MIG"


class TimeSlice(StrEnum):
    """The time slice of time-sliced GPU scheduling (``nvidia-smi compute-policy``)."""

    DEFAULT = "Default"
    SHORT = "Short"
    MEDIUM = "Medium"
    LONG = "Long"


#: Modes whose devices are published as memory-shared (consumable ``kubeacc.io/memory``).
MEMORY_SHARED_MODES = frozenset({SharingMode.MEMORY_SHARED, SharingMode.MPS})
#: Modes that change the GPU itself: only for policies that select GPUs alone.
GPU_ONLY_MODES = frozenset({SharingMode.MPS, SharingMode.MIG})


#: The fault classes a remediation rule acts on and a node agent reports (no docstring: it
#: would become the CRD schema's description of the fields of this type).
class EventClass(StrEnum):
    XID = "Xid"
    ECC_UNCORRECTABLE = "EccUncorrectable"
    FALLEN_OFF_BUS = "FallenOffBus"
    FPGA_PORT_ERROR = "FpgaPortError"
    LINK_DOWN = "LinkDown"
    HEALTH_FAILING = "HealthFailing"


# The enumerations of the operations and conditions (no docstrings: they would become the CRD
# schema's descriptions of the fields of these types).
class ConditionStatus(StrEnum):
    TRUE = "True"
    FALSE = "False"
    UNKNOWN = "Unknown"


class Action(StrEnum):
    PROGRAM = "Program"
    RESET = "Reset"
    POWER = "Power"
    ATTACH = "Attach"
    DETACH = "Detach"
    DRAIN = "Drain"
    UNCORDON = "Uncordon"
    MIG_MODE = "MigMode"


#: Actions the controller carries out itself, on the Accelerator objects (no hardware touched).
CONTROLLER_ACTIONS = frozenset({Action.DRAIN, Action.UNCORDON})


class PowerState(StrEnum):
    ON = "On"
    OFF = "Off"
    CYCLE = "Cycle"


class OperationPhase(StrEnum):
    PENDING = "Pending"
    RUNNING = "Running"
    SUCCEEDED = "Succeeded"
    FAILED = "Failed"


#: An AcceleratorPolicy's ``onUnhealthy`` (no docstring: it would be the schema's description).
class UnhealthyAction(StrEnum):
    TAINT = "Taint"
    DRAIN = "Drain"


#: A remediation rule's ``action`` (kubeacc.crds.remediation).
class RemediationAction(StrEnum):
    TAINT = "Taint"
    DRAIN_AND_RESET = "DrainAndReset"
    DRAIN_AND_POWER_CYCLE = "DrainAndPowerCycle"
    HAND_TO_ADMIN = "HandToAdmin"


#: A remediation section's rate limits when the policy leaves them out: (max, windowSeconds).
REMEDIATION_LIMITS = {"perDevice": (1, 86400), "perNode": (2, 3600), "perFleet": (10, 3600)}

#: The Accelerator condition the remediation loop keeps (True while remediation holds it).
REMEDIATION_CONDITION = "Remediation"


def health_failing_thresholds(policies: Iterable[Mapping[str, Any]]) -> frozenset[int]:
    """The ``failures`` counts of every ``HealthFailing`` rule in ``policies`` (API objects as
    dicts): the counts at which a node agent reports a device whose health check keeps failing
    (kubeacc.agent.telemetry.faults). Malformed rules are skipped; the API server's schema
    keeps them out in the first place."""
    out: set[int] = set()
    for policy in policies:
        section = (policy.get("spec") or {}).get("remediation") or {}
        for rule in section.get("rules") or []:
            if isinstance(rule, Mapping) and rule.get("event") == EventClass.HEALTH_FAILING:
                failures = rule.get("failures", 1)
                if isinstance(failures, int) and 1 <= failures <= 100:
                    out.add(failures)
    return frozenset(out)
