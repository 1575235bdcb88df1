"""Where the plugin reads ResourceClaims: the API server, by namespace and name."""

from __future__ import annotations

from typing import Any, Protocol

from lightkube import ApiError, Client
from lightkube.resources.resource_v1 import ResourceClaim


class ClaimSource(Protocol):
    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The claim as API JSON (camelCase), or None if it does not exist."""


class ApiClaimSource:
    """Reads each claim from the API server (always current; one GET per claim)."""

    def __init__(self, client: Client) -> None:
        self.client = client

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        try:
            obj = self.client.get(ResourceClaim, name, namespace=namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise
        return obj.to_dict()
