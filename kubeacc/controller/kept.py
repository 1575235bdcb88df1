"""What the controller keeps of each Accelerator and Node in its watch caches.

At 5,000 nodes of 16 devices the controller caches 80,000 Accelerators; kept whole (managed
fields, the device's PCI identity, topology, partitions, attributes) each cost ~19 KB of Python
objects, ~1.6 GB in all (docs/benchmarks.md). A pass reads a few fields of each; they are
listed here, in one place, and :func:`accelerator` keeps those and nothing else. The cache
applies it to every listed object, watch event and write's answer
(:class:`kubeacc.crds.watch.WatchCache` ``keep``). Of a Node only its name is kept: garbage
collection asks which Nodes exist, nothing more.

Who reads what of a cached Accelerator:

* ``apiVersion``, ``kind``, ``metadata.name``/``uid``/``resourceVersion``: Events about it
  (:func:`kubeacc.crds.events.emit_event`), the cache's ordering, the pass's parsed facts;
* ``metadata.annotations``, only the keys in :data:`ANNOTATIONS`: cordons and remediation;
* ``spec.node``/``deviceName``/``cordoned``: cordons, drains, dispatch, garbage collection,
  metrics;
* ``status.device``: the policies' selectors (type, vendor, model) and its health; the device's
  identity fields stay so that it still validates as a :class:`kubeacc.model.Device`;
* ``status.allocatedTo``, ``status.lastFault``: dispatch (in use?) and remediation;
* ``status.conditions``: only remediation's own (``Remediation``).

A kept object is for reading only: no write may be built from it. The controller's writes to
Accelerators are merge patches of just the fields they change (``spec.cordoned`` and its
annotations) and a server-side apply of its own condition (a map-list keyed by type), so what
is left out here is never sent back. An operation's validation at first sight reads its targets
whole (GET), not from the cache. A new reader of another field adds it here
(tests/controller/test_kept.py runs the passes on whole and on kept objects).

Strings that repeat across objects (node and device names, models, reasons) are interned, and
every kept dict is built afresh with this module's keys, so the keys are shared too
(:mod:`kubeacc.crds.keep`, shared with the extender's :mod:`kubeacc.extender.kept`).
"""

from __future__ import annotations

import sys
from typing import Any

from kubeacc.contracts.names import CORDONED_BY_ANNOTATION
from kubeacc.controller.remediator import (
    FAULT_ANNOTATION,
    OPERATION_ANNOTATION,
    RETURNED_ANNOTATION,
)
from kubeacc.crds.api import REMEDIATION_CONDITION
from kubeacc.crds.keep import pick, shared

#: The annotations the controller reads (the rest of ``metadata.annotations`` is not kept).
ANNOTATIONS = (CORDONED_BY_ANNOTATION, FAULT_ANNOTATION, OPERATION_ANNOTATION, RETURNED_ANNOTATION)
METADATA = ("name", "uid", "resourceVersion")
SPEC = ("node", "deviceName", "cordoned")
#: Of ``status.device``: what selectors and health checks read, and what a Device needs.
DEVICE = ("name", "type", "vendor", "model", "index", "source", "health")
#: Of ``status``, kept as they come (small, and rarely set).
STATUS = ("allocatedTo", "lastFault")


def accelerator(obj: dict[str, Any]) -> dict[str, Any]:
    """What the controller keeps of an Accelerator (see the module docstring)."""
    meta = obj.get("metadata") or {}
    out: dict[str, Any] = pick(obj, ("apiVersion", "kind"))
    kept_meta = pick(meta, METADATA, share=False)
    notes = meta.get("annotations") or {}
    if any(k in notes for k in ANNOTATIONS):
        kept_meta["annotations"] = pick(notes, ANNOTATIONS)
    out["metadata"] = kept_meta
    if "spec" in obj:
        out["spec"] = pick(obj["spec"] or {}, SPEC)
    if "status" in obj:
        status = obj["status"] or {}
        kept: dict[str, Any] = pick(status, STATUS, share=False)
        device = status.get("device")
        if isinstance(device, dict):
            kept["device"] = dev = pick(device, DEVICE)
            if isinstance(dev.get("health"), dict):
                dev["health"] = {sys.intern(k): shared(v) for k, v in dev["health"].items()}
        conditions = [
            c
            for c in status.get("conditions") or []
            if isinstance(c, dict) and c.get("type") == REMEDIATION_CONDITION
        ]
        if conditions:
            kept["conditions"] = conditions
        out["status"] = kept
    return out


def node(obj: dict[str, Any]) -> dict[str, Any]:
    """What the controller keeps of a Node: its name (and the version the cache orders by)."""
    meta = obj.get("metadata") or {}
    return {"metadata": pick(meta, ("name", "resourceVersion"), share=False)}
