"""Writing ``status.devices`` of a ResourceClaim: a JSON patch guarded by the claim's
``resourceVersion``, re-read and recomputed on a conflict.

The first try starts from the freshest copy of the claim the writer has (the server's answer
to its own last write of that claim, or the agent's watch of its claims): one request per
write, not a GET and a PATCH; a stale copy fails the guard and the claim is read then. A copy
that already shows what is wanted is trusted only when it is the server's answer to the writer's
own last write (``trusted``: nobody else writes this node's entries), and then nothing is sent;
any other copy is confirmed by a read first.

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
#: Gets each copy of the claim the server sent (a read, or the answer to the patch).
Seen = Callable[[dict[str, Any]], None]


def patch_devices(
    client: Client,
    namespace: str,
    name: str,
    change: Change,
    field_manager: str,
    first: dict[str, Any] | None = None,
    *,
    trusted: bool = False,
    seen: Seen | None = None,
) -> bool:
    """Read the claim (or start from ``first``, a copy of it), compute its new
    ``status.devices`` and write them if the claim did not change meanwhile (else read again,
    :data:`CONFLICTS` times at most). ``trusted``: ``first`` is the server's answer to this
    writer's own last write, so devices equal to its own are taken as already so (nothing
    sent); ``seen`` gets each copy the server sent. False when the claim is gone or ``change``
    leaves it alone; raises RuntimeError when it kept changing."""
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
            if seen is not None:
                seen(data)
        else:
            fresh, trusted = trusted, False
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
            answer = client.patch(
                ResourceClaim.Status,
                name,
                patch,
                namespace=namespace,
                patch_type=PatchType.JSON,
                field_manager=field_manager,
            )
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            if exc.status.code not in (409, 422):  # 422: the resourceVersion test failed
                raise
        else:
            if seen is not None:
                seen(answer.to_dict())
            return True
    raise RuntimeError(f"claim {namespace}/{name} kept changing")
