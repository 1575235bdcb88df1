"""What the extender keeps of each Accelerator and Pod in its watch caches.

The extender watches every Accelerator and every Pod of the cluster (:class:`.kube.Inventory`):
at 5,000 nodes of 8 GPUs, 40,000 Accelerators and as many pods as the cluster runs, each of
which it reads a few fields of. They are listed here, in one place; :func:`accelerator` and
:func:`pod` keep those and nothing else, applied by the caches to every listed object and watch
event (:class:`kubeacc.crds.watch.WatchCache` ``keep``). The helpers are
:mod:`kubeacc.crds.keep`'s, shared with the controller's :mod:`kubeacc.controller.kept`.

Who reads what of a cached Accelerator (:func:`.kube.accelerator_gpu`, then
:func:`.state.gpu_of` and the node's topology graph, :meth:`.state.NodeView.graph`):

* ``metadata.name``/``resourceVersion``: the cache's key and ordering;
* ``spec.node``, ``spec.deviceName``, ``spec.cordoned``;
* ``status.device``, the fields :data:`DEVICE`: ``type``, ``pci.busID``, ``model`` and
  ``vendor`` (the model's slug and units), ``memoryBytes``, ``numaNode``, ``health.state``; for
  the topology (best sets of whole GPUs) ``name``, ``pcieRoot``, ``pciePath`` and ``links``;
  ``index``, ``source`` and the PCI identity's required ``vendorId``/``deviceId``/``classId``
  so that it still validates as a :class:`kubeacc.model.Device`. Not read: the health's
  reason, ``localCpus``, ``uuid``, ``serial``, ``driverVersion``, ``deviceNodes``,
  ``netdevs``, ``rdmaDevices``, ``sriov``, ``partitions``, ``fpga``, ``attributes``, the
  rest of ``pci``, and all of ``status`` but ``device`` (conditions, ``lastSeen``,
  ``allocatedTo``, ...), labels, annotations and managed fields.

Who reads what of a cached Pod (:meth:`.state.State.set_pods`, :meth:`.state.State.pod_event`,
:func:`.trusted.trusted_decision`):

* ``metadata.name``/``namespace``/``resourceVersion``: the cache's key and ordering, and the
  log line about a refused decision; ``metadata.uid``: whose holding it is;
* ``metadata.annotations``, only :data:`DECISION_ANNOTATION` (the decision);
* ``status.conditions``, only the one of type :data:`DECISION_CONDITION` (the extender's
  record of the decision), its ``type``, ``status`` and ``message``;
* ``spec.nodeName``: a decision counts only on the node the pod is bound to;
* ``status.phase``: a finished pod holds nothing;
* with a decision (annotation or record) only, ``spec.containers``: each container's ``name`` and
  the ``kubeacc.io/gpu*`` entries of ``resources.requests``/``limits`` (the decision must be what
  the container asks for, :func:`.trusted.decision_problem`); containers that ask no GPU cannot be
  named by a consistent decision and are left out. Init containers, other resources, images,
  environment, volumes, conditions, ...: not read.

A kept object is for reading only: no write is built from one. The extender's writes to pods
are a patch of the decision condition (``pods/status``) and one of the decision annotation
(both with the uid from the scheduler's bind call) and a ``pods/binding``
(:class:`.kube.KubeBinder`); bind reads the pod it binds with a GET
(``KubeBinder.get_pod``), whole, not from the cache. A new reader of another field adds it here
(tests/extender/test_kept.py answers the same pods on whole and on kept caches).
"""

from __future__ import annotations

from typing import Any

from kubeacc.contracts.names import DECISION_ANNOTATION, DECISION_CONDITION
from kubeacc.contracts.wants import GPU
from kubeacc.crds.keep import identity, pick, shared

SPEC = ("node", "deviceName", "cordoned")
#: Of ``status.device`` (see the module docstring); ``pci``, ``health`` and ``links`` are cut
#: further below.
DEVICE = (
    "name",
    "type",
    "vendor",
    "model",
    "index",
    "source",
    "numaNode",
    "pcieRoot",
    "pciePath",
    "memoryBytes",
)
#: Of ``status.device.pci``: the address and what a PCI identity needs to validate.
PCI = ("busID", "vendorId", "deviceId", "classId")
LINK = ("peer", "kind", "count")
#: A container resource the extender reads starts with this (``kubeacc.io/gpu``,
#: ``kubeacc.io/gpu-memory``, ``-cores``, ``-units``, ``-<model>``).
RESOURCE_PREFIX = GPU


def accelerator(obj: dict[str, Any]) -> dict[str, Any]:
    """What the extender keeps of an Accelerator (see the module docstring)."""
    out: dict[str, Any] = {"metadata": identity(obj)}
    if "spec" in obj:
        out["spec"] = pick(obj["spec"] or {}, SPEC)
    device = (obj.get("status") or {}).get("device")
    if isinstance(device, dict):
        kept = pick(device, DEVICE)
        if isinstance(kept.get("pciePath"), list):
            kept["pciePath"] = [shared(p) for p in kept["pciePath"]]
        if isinstance(device.get("pci"), dict):
            kept["pci"] = pick(device["pci"], PCI)
        if isinstance(device.get("health"), dict):
            kept["health"] = pick(device["health"], ("state",))
        links = device.get("links")
        if isinstance(links, list):
            kept["links"] = [pick(link, LINK) if isinstance(link, dict) else link for link in links]
        out["status"] = {"device": kept}
    return out


def _resources(resources: Any) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if not isinstance(resources, dict):
        return out
    for part in ("requests", "limits"):
        amounts = resources.get(part)
        if isinstance(amounts, dict):
            mine = {
                shared(k): shared(v)
                for k, v in amounts.items()
                if isinstance(k, str) and k.startswith(RESOURCE_PREFIX)
            }
            if mine:
                out[part] = mine
    return out


def pod(obj: dict[str, Any]) -> dict[str, Any]:
    """What the extender keeps of a Pod (see the module docstring)."""
    meta = obj.get("metadata") or {}
    kept_meta = identity(obj)
    spec = obj.get("spec") or {}
    status = obj.get("status") or {}
    kept_spec: dict[str, Any] = pick(spec, ("nodeName",))
    notes = meta.get("annotations") or {}
    record = [
        pick(c, ("type", "status", "message"), share=False)
        for c in status.get("conditions") or []
        if isinstance(c, dict) and c.get("type") == DECISION_CONDITION
    ]
    if DECISION_ANNOTATION in notes:
        kept_meta["annotations"] = {DECISION_ANNOTATION: notes[DECISION_ANNOTATION]}
    if notes.get(DECISION_ANNOTATION) or record:
        containers = []
        for c in spec.get("containers") or []:
            if not isinstance(c, dict):
                continue
            resources = _resources(c.get("resources"))
            if resources:
                containers.append({"name": shared(c.get("name", "")), "resources": resources})
        kept_spec["containers"] = containers
    out: dict[str, Any] = {"metadata": kept_meta, "spec": kept_spec}
    kept_status: dict[str, Any] = {}
    if status.get("phase") is not None:
        kept_status["phase"] = shared(status["phase"])
    if record:
        kept_status["conditions"] = record
    if kept_status:
        out["status"] = kept_status
    return out


def whole(obj: dict[str, Any]) -> dict[str, Any]:
    """Every field (the caches before this module; tests and bench/extender_memory.py compare)."""
    return obj
