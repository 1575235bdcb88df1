"""Names that more than one component of kube-acc writes or reads, defined once.

The node agent publishes what the controller's DeviceClasses select, the extender writes what
the device plugin reads, the controller annotates what the agent honours: each such name lives
here, so neither side imports the other for it.
"""

from __future__ import annotations

import re

from kubeacc.model.accelerator import Device

#: The DRA driver, the extended-resource domain and the API group's domain.
DOMAIN = "kubeacc.io"
#: The DRA driver's name: ResourceSlices, DeviceClasses and the kubelet plugin.
DRIVER_NAME = DOMAIN
#: Prefix of every attribute and capacity the driver publishes (``kubeacc.io/type`` ...).
ATTR_DOMAIN = DOMAIN

# -- device taints: written by the agent on slice entries, read by the controller's taint rules --
#: The health taint (``kubeacc.io/health=<why>``) on a device and on its partitions and VFs.
HEALTH_TAINT = f"{DOMAIN}/health"

# -- extended resources: served by the device plugin, placed by the extender ---------------------
GPU_MEMORY_RESOURCE = f"{DOMAIN}/gpu-memory"
GPU_CORES_RESOURCE = f"{DOMAIN}/gpu-cores"
GPU_UNITS_RESOURCE = f"{DOMAIN}/gpu-units"

# -- pod annotations: read (models) and written (decision) by the extender, read by the plugin ---
MODELS_ANNOTATION = f"{DOMAIN}/gpu-models"
PREFER_ANNOTATION = f"{DOMAIN}/prefer-models"
MIX_ANNOTATION = f"{DOMAIN}/mix-models"
#: The extender's decision, written on the pod at bind (JSON; kubeacc.contracts.wants.Decision).
DECISION_ANNOTATION = f"{DOMAIN}/devices"
#: The same decision as the extender's record: a pod condition of this type (message: the
#: JSON), written through ``pods/status``, which a namespace user cannot write. Where the
#: annotation disagrees with it (a tenant removed or changed it), the condition counts.
DECISION_CONDITION = f"{DOMAIN}/Decided"

# -- Accelerator annotation: written by the controller's Cordon, honoured by the agent ----------
CORDONED_BY_ANNOTATION = f"{DOMAIN}/cordoned-by"

# -- slice attributes of MIG partitions: published by the agent, selected by policy classes -----
MIG_PROFILE_ATTR = "migProfile"
MIG_START_ATTR = "migStart"
MIG_COMPUTE_SLICES_ATTR = "migComputeSlices"
MIG_PARENT_UUID_ATTR = "parentUUID"
MIG_PARENT_BUS_ATTR = "parentPciBusID"
#: On a whole GPU in MIG mode.
MIG_ENABLED_ATTR = "migEnabled"

_SLUG_RE = re.compile(r"[^a-z0-9]+")


def belongs_to(entry_name: str, device: str) -> bool:
    """Is the slice entry ``entry_name`` the device or one of its MIG partitions or VFs?"""
    if entry_name == device:
        return True
    gpu, mig, _ = entry_name.partition("-mig-")
    if mig and gpu == device:
        return True
    pf, sep, vf = entry_name.rpartition("-vf")
    return bool(sep) and vf.isdigit() and pf == device


def model_slug(dev: Device) -> str:
    """``NVIDIA H100 80GB HBM3`` -> ``h100-80gb-hbm3``: the model part of a resource name
    (``kubeacc.io/gpu-h100-80gb-hbm3``), as the device plugin serves it and the extender
    matches it."""
    model = dev.model
    if model.lower().startswith(dev.vendor.lower() + " "):
        model = model[len(dev.vendor) + 1 :]
    slug = _SLUG_RE.sub("-", model.lower()).strip("-")
    return slug[: 63 - len(dev.type.value) - 1].strip("-") or "unknown"
