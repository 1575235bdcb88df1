"""The Volcano PodGroups of a live cluster, for ``kubeacc plan``.

A pod Volcano schedules names its PodGroup (``scheduling.k8s.io/group-name``); the group holds
the gang size (``spec.minMember``) and the queue (``spec.queue``) that
:mod:`kubeacc.cli.planscheduler` reports as not predicted. Read from a folder, the groups are
the folder's; from a cluster they are listed here, in the namespaces of the Volcano pods only
(a cluster without Volcano is never asked). Where they cannot be read, the reason is kept per
namespace: the CRD is not served (Volcano is not installed), or RBAC forbids listing them.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from kubeacc.cli.planscheduler import VOLCANO

GROUP = "scheduling.volcano.sh"
VERSION = "v1beta1"
API_VERSION = f"{GROUP}/{VERSION}"


def volcano_namespaces(objs: Iterable[dict[str, Any]]) -> list[str]:
    """The namespaces of the pods among ``objs`` that name Volcano as their scheduler."""
    return sorted(
        {
            (o.get("metadata") or {}).get("namespace") or "default"
            for o in objs
            if o.get("kind") == "Pod" and (o.get("spec") or {}).get("schedulerName") == VOLCANO
        }
    )


def read_pod_groups(
    client: Any, namespaces: Iterable[str]
) -> tuple[list[dict[str, Any]], dict[str, str]]:
    """The PodGroups of ``namespaces`` (as dicts with ``kind`` and ``apiVersion``), and for each
    namespace whose groups could not be read, why. Other API errors propagate."""
    import httpx2
    from lightkube import ApiError
    from lightkube.generic_resource import create_namespaced_resource

    from kubeacc.crds.resources import as_dict

    pod_group = create_namespaced_resource(GROUP, VERSION, "PodGroup", "podgroups")
    spaces = list(namespaces)
    groups: list[dict[str, Any]] = []
    unread: dict[str, str] = {}
    for ns in spaces:
        try:
            found = list(client.list(pod_group, namespace=ns))
        except (ApiError, httpx2.HTTPStatusError) as e:
            # an API group the server does not serve answers 404 without a Status body
            code = int(e.status.code or 0) if isinstance(e, ApiError) else e.response.status_code
            if code == 404:
                unread[ns] = (
                    f"PodGroups ({API_VERSION}) are not served by this cluster (Volcano's "
                    "CRDs are not installed)"
                )
                # the same for every namespace: one answer is enough
                unread.update({n: unread[ns] for n in spaces})
                break
            if code == 403:
                unread[ns] = (
                    f"not allowed to list PodGroups ({API_VERSION}) in namespace {ns} "
                    f"(RBAC: list podgroups.{GROUP}): {_message(e)}"
                )
                continue
            raise
        groups += [{**as_dict(g), "kind": "PodGroup", "apiVersion": API_VERSION} for g in found]
    return groups, unread


def _message(e: Exception) -> str:
    status = getattr(e, "status", None)
    return str(getattr(status, "message", None) or e)
