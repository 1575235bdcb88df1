"""AcceleratorPolicies as a node daemon reads them: checked against the CRD's schema without
pydantic (:mod:`kubeacc.crds.schemastructs`), and matched against a node's devices."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, cast

from kubeacc.crds.schemastructs import SchemaViolation, validate
from kubeacc.crds.views import PolicySpecView, SelectorView
from kubeacc.model import Device

log = logging.getLogger(__name__)


def policy_spec(obj: Mapping[str, Any]) -> PolicySpecView:
    """The ``spec`` of an AcceleratorPolicy object as a validated Struct (attributes in snake
    case: ``spec.sharing.max_consumers``); raises :class:`SchemaViolation`."""
    return cast(PolicySpecView, validate("AcceleratorPolicy", "spec", obj.get("spec") or {}))


def valid_specs(policies: Iterable[Mapping[str, Any]]) -> Iterator[tuple[str, str, PolicySpecView]]:
    """(name, uid, spec) of each policy whose spec is valid; each invalid one is skipped with
    a warning naming the policy and the field."""
    for obj in policies:
        meta = obj.get("metadata") or {}
        name = str(meta.get("name", "?"))
        try:
            spec = policy_spec(obj)
        except SchemaViolation as exc:
            log.warning("AcceleratorPolicy %s ignored: %s", name, exc)
            continue
        yield name, str(meta.get("uid", "")), spec


def selector_matches(selector: SelectorView, device: Device) -> bool:
    """True when a policy selector covers ``device`` (empty lists match everything); the
    selector of a Struct from :func:`policy_spec` or of the pydantic ``PolicySelector``."""
    if selector.types and device.type not in selector.types:
        return False
    if selector.vendors and device.vendor not in selector.vendors:
        return False
    return not selector.models or device.model in selector.models


def allowed_bitstream_digests(policies: Iterable[Mapping[str, Any]], device: Device) -> set[str]:
    """SHA-256 digests that the AcceleratorPolicies selecting ``device`` allow on it; raises
    :class:`SchemaViolation` for an invalid policy (refusing is the safe answer)."""
    allowed: set[str] = set()
    for pol in policies:
        spec = policy_spec(pol)
        if selector_matches(spec.selector, device):
            allowed |= {b.sha256 for b in spec.allowed_bitstreams}
    return allowed
