"""The static manifests under ``deploy/`` (RBAC, admission), loadable from Python."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from lightkube import Client
from lightkube.resources.admissionregistration_v1 import (
    ValidatingAdmissionPolicy,
    ValidatingAdmissionPolicyBinding,
)
from lightkube.resources.core_v1 import ServiceAccount
from lightkube.resources.rbac_authorization_v1 import (
    ClusterRole,
    ClusterRoleBinding,
    Role,
    RoleBinding,
)
from lightkube.types import PatchType

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"

_KINDS: dict[str, Any] = {
    "ClusterRole": ClusterRole,
    "ClusterRoleBinding": ClusterRoleBinding,
    "ServiceAccount": ServiceAccount,
    "Role": Role,
    "RoleBinding": RoleBinding,
    "ValidatingAdmissionPolicy": ValidatingAdmissionPolicy,
    "ValidatingAdmissionPolicyBinding": ValidatingAdmissionPolicyBinding,
}

__all__ = ["DEPLOY", "apply_manifest", "manifests"]


def manifests(relative: str) -> list[dict[str, Any]]:
    """The documents of ``deploy/<relative>``."""
    text = (DEPLOY / relative).read_text()
    return [d for d in yaml.safe_load_all(text) if d]


def apply_manifest(client: Client, relative: str, field_manager: str = "kubeacc") -> None:
    """Server-side apply every document of ``deploy/<relative>``."""
    for doc in manifests(relative):
        kind = _KINDS[doc["kind"]]
        meta = doc["metadata"]
        client.patch(
            kind,
            meta["name"],
            doc,
            namespace=meta.get("namespace"),
            patch_type=PatchType.APPLY,
            field_manager=field_manager,
            force=True,
        )
