"""Helpers for cutting cached objects down to the fields their reader uses.

Watch caches of big kinds (:class:`kubeacc.crds.watch.WatchCache` ``keep``) hold only what
their owner reads: the controller's (:mod:`kubeacc.controller.kept`) and the extender's
(:mod:`kubeacc.extender.kept`) projections are built from these. Strings that many objects
repeat (node names, models, namespaces, resource names) are interned, and every kept dict is
built afresh with the projection's own key strings, so the keys are shared too.
"""

from __future__ import annotations

import sys
from typing import Any

#: What the cache orders and keys by: every projection keeps these of ``metadata``.
IDENTITY = ("name", "namespace", "uid", "resourceVersion")


def shared(value: Any) -> Any:
    """``value``, interned if it is a string (a value many objects repeat)."""
    return sys.intern(value) if isinstance(value, str) else value


def pick(obj: dict[str, Any], keys: tuple[str, ...], share: bool = True) -> dict[str, Any]:
    """The entries of ``obj`` under ``keys`` (those it has), string values interned unless
    ``share`` is false (values unique to one object: names, uids, resourceVersions)."""
    return {k: shared(obj[k]) if share else obj[k] for k in keys if k in obj}


def identity(obj: dict[str, Any]) -> dict[str, Any]:
    """Of ``obj``'s metadata, what a cache needs: name, namespace, uid, resourceVersion (the
    namespace interned, the rest unique to the object)."""
    meta = obj.get("metadata") or {}
    out = pick(meta, ("name", "uid", "resourceVersion"), share=False)
    if meta.get("namespace"):
        out["namespace"] = shared(meta["namespace"])
    return out
