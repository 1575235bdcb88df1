"""Writing ``status.devices`` of a ResourceClaim: a JSON patch guarded by the claim's
``resourceVersion``, re-read and recomputed on a conflict.

The first try starts from the agent's watch of its claims when it has the claim (one request
per write, not a GET and a PATCH); a stale copy fails the guard and the claim is read then.

Not a server-side apply: the API server cannot take an apply to a claim whose allocation
carries opaque configs (a ``GpuConfig``, an ``FpgaConfig``) from a node agent. It reads the
apply as a change of ``status.allocation``, which needs ``resourceclaims/binding``, and refuses
it (422). The device-status writer and the binding-condition writer both go through here.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim
from lightkube.types import PatchType

#: Re-reads of a claim that changed between read and write, per write.
CONFLICTS = 5

#: (the claim as API JSON) -> its new ``status.devices``, or None to leave the claim alone
Change = Callable[[dict[str, Any]], list[dict[str, Any]] | None]


def patch_devices(
    client: Client,
    namespace: str,
    name: str,
    change: Change,
    field_manager: str,
    first: dict[str, Any] | None = None,
) -> bool:
    """Read the claim (or start from ``first``, a copy of it from a watch), compute its new
    ``status.devices`` and write them if the claim did not change meanwhile (else read again,
    :data:`CONFLICTS` times at most). False when the claim is gone or ``change`` leaves it
    alone; raises RuntimeError when it kept changing."""
    for _ in range(CONFLICTS):
        data, first = first, None
        if data is None:
            try:
                data = client.get(ResourceClaim, name, namespace=namespace).to_dict()
            except ApiError as exc:
                if exc.status.code == 404:
                    return False
                raise
            fresh = True
        else:
            fresh = False
        devices = change(data)
        if devices is None:
            if fresh:
                return False
            continue  # the copy may be stale: decide on the server's claim
        if devices == ((data.get("status") or {}).get("devices") or []):
            if fresh:
                return True  # already so
            continue
        patch = [
            {
                "op": "test",
                "path": "/metadata/resourceVersion",
                "value": data["metadata"]["resourceVersion"],
            },
            {"op": "add", "path": "/status/devices", "value": devices},
        ]
        try:
            client.patch(
                ResourceClaim.Status,
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.JSON,
                field_manager=field_manager,
            )
            return True
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            if exc.status.code not in (409, 422):  # 422: the resourceVersion test failed
                raise
    raise RuntimeError(f"claim {namespace}/{name} kept changing")
