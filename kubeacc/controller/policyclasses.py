"""Policy -> DeviceClass: every AcceleratorPolicy's class applied (when its spec changed),
classes of policies that are gone deleted, and each policy's status (its class, the number of
Accelerators it selects). The class itself is :func:`kubeacc.controller.policies.device_class`.
"""

from __future__ import annotations

import logging
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import DeviceClass
from lightkube.types import PatchType

from kubeacc.controller.policies import SPEC_HASH_ANNOTATION, device_class
from kubeacc.controller.status import FIELD_MANAGER, apply_policy_status
from kubeacc.crds.api import POLICY_LABEL
from kubeacc.crds.controlread import policy_spec
from kubeacc.crds.events import emit_event
from kubeacc.crds.watch import WatchCache

log = logging.getLogger(__name__)


def policy_specs(policies: list[dict[str, Any]]) -> dict[str, Any]:
    """Each policy's spec (kubeacc.crds.controlread), by policy name."""
    return {p["metadata"]["name"]: policy_spec(p) for p in policies}


def reconcile_policies(
    client: Client,
    cache: WatchCache,
    classes: WatchCache,
    policies: list[dict[str, Any]],
    covered: list[tuple[str, ...]],
) -> None:
    """One step toward one DeviceClass per policy (module docstring); ``cache``: the policies';
    ``classes``: the DeviceClasses of policies (label ``POLICY_LABEL``), what this writes goes
    into it; ``covered``: for each Accelerator, the policies that select it."""
    existing = classes.by_name()
    wanted: set[str] = set()
    for policy in policies:
        name = policy["metadata"]["name"]
        cls = device_class(policy)
        cname = cls["metadata"]["name"]
        wanted.add(cname)
        have = existing.get(cname)
        have_meta = (have or {}).get("metadata") or {}
        have_hash = (have_meta.get("annotations") or {}).get(SPEC_HASH_ANNOTATION)
        if have_hash != cls["metadata"]["annotations"][SPEC_HASH_ANNOTATION]:
            written = client.patch(
                DeviceClass,
                cname,
                cls,
                patch_type=PatchType.APPLY,
                field_manager=FIELD_MANAGER,
                force=True,
            )
            classes.observe(written)
            emit_event(
                client,
                policy,
                "DeviceClassUpdated" if have else "DeviceClassCreated",
                f"DeviceClass {cname}: {cls['spec']['selectors'][0]['cel']['expression']}",
            )
        matched = sum(1 for policies_of in covered if name in policies_of)
        apply_policy_status(client, cache, policy, cname, matched)
    for cname, obj in existing.items():
        if cname not in wanted:
            owner = ((obj.get("metadata") or {}).get("labels") or {}).get(POLICY_LABEL)
            log.info("deleting DeviceClass %s (policy %s is gone or renamed it)", cname, owner)
            try:
                client.delete(DeviceClass, cname)
            except ApiError as exc:
                if int(exc.status.code or 0) != 404:
                    raise
            classes.forget(cname)
