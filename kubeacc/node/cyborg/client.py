"""Cyborg's v2 API and Placement's REST API, as kube-acc calls them in Nova's place.

Plain HTTP with JSON bodies (the standard library's client: the project carries no HTTP library
of its own, and these are a handful of calls). Every request names who is calling by the
:class:`Credentials` read from a file (a mounted Secret): a Keystone token when there is one, or
the identity headers a token would have given, for a Cyborg served behind a proxy that checks the
token itself. Nothing a claim says ever reaches these headers.

Errors: :class:`CyborgUnavailable` when the service cannot be reached or answers 5xx (worth a
retry, the state on its side unknown), :class:`CyborgRefused` for any other refusal (4xx, with
Cyborg's own message).
"""

from __future__ import annotations

import json
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path
from typing import Any

import msgspec

from kubeacc.safeyaml import InputError, load_file

#: Cyborg's microversion 2.0: the ARQ fields kube-acc reads and writes are all there.
CYBORG_VERSION = "accelerator 2.0"
#: Placement's: consumer generations (1.28) and resource provider trees (1.14) are needed.
PLACEMENT_VERSION = "placement 1.28"
TIMEOUT_S = 10.0
#: Cyborg's program API answers when its agent's tool has loaded the bitstream.
PROGRAM_TIMEOUT_S = 120.0


class CyborgError(Exception):
    """A Cyborg or Placement call failed."""


class CyborgUnavailable(CyborgError):
    """Not reached, timed out, or a 5xx: the call may be tried again."""


class CyborgRefused(CyborgError):
    """A 4xx: the request itself is refused (``status``: the HTTP status)."""

    def __init__(self, message: str, status: int) -> None:
        super().__init__(message)
        self.status = status


class Credentials(msgspec.Struct, frozen=True, kw_only=True, rename="camel"):
    """Who kube-acc is to Cyborg and Placement (``--cyborg-credentials``, a Secret's file).

    ``token``: sent as ``X-Auth-Token`` to both. Without Keystone in front (a proxy that checks
    tokens, or a test cloud), the identity headers below are sent too; ``service`` adds
    ``X-Service-Roles: service``, which Cyborg requires to bind and unbind (Nova's role).
    ``eventsToken``: the token Cyborg's ``[nova]`` section sends to kube-acc's event endpoint
    (empty: the endpoint takes any caller, only for a private address). ``glanceUrl``: Glance,
    where the life-cycle agent uploads the bitstreams Cyborg programs (empty: FPGA programming
    through Cyborg is refused)."""

    cyborg_url: str
    placement_url: str
    glance_url: str = ""
    token: str = ""
    project_id: str = ""
    user_id: str = ""
    roles: str = "admin,member,reader"
    service: bool = True
    events_token: str = ""


def read_credentials(path: Path) -> Credentials:
    """The credentials file (YAML or JSON); ValueError names what is wrong with it."""
    try:
        docs = load_file(path)
    except InputError as exc:
        raise ValueError(f"Cyborg credentials: {exc}") from None
    if len(docs) != 1:
        raise ValueError(f"Cyborg credentials {path}: {len(docs)} documents, not 1")
    try:
        return msgspec.convert(docs[0], Credentials)
    except msgspec.ValidationError as exc:
        raise ValueError(f"Cyborg credentials {path}: {exc}") from None


def _headers(creds: Credentials, version: str) -> dict[str, str]:
    out = {"Accept": "application/json", "OpenStack-API-Version": version}
    if creds.token:
        out["X-Auth-Token"] = creds.token
    if creds.project_id:
        out["X-Project-Id"] = creds.project_id
    if creds.user_id:
        out["X-User-Id"] = creds.user_id
    if creds.roles:
        out["X-Roles"] = creds.roles
    if creds.service:
        out["X-Service-Roles"] = "service"
    return out


def _message(body: bytes) -> str:
    """Cyborg's or Placement's error text from an error body."""
    try:
        data = json.loads(body)
    except ValueError:
        return body.decode(errors="replace").strip()[:300]
    if isinstance(data, dict):
        if isinstance(data.get("error_message"), str):  # Cyborg: JSON in a string
            try:
                inner = json.loads(data["error_message"])
                # a remote error carries the agent's traceback after its first line
                return str(inner.get("faultstring", inner)).split("\n")[0]
            except (ValueError, AttributeError):
                return str(data["error_message"])
        errors = data.get("errors")
        if isinstance(errors, list) and errors:  # Placement
            return "; ".join(str(e.get("detail", e)) for e in errors if isinstance(e, dict))
    return str(data)[:300]


class _Api:
    def __init__(self, base: str, headers: dict[str, str], what: str) -> None:
        self.base = base.rstrip("/")
        self.headers = headers
        self.what = what

    def call(
        self,
        method: str,
        path: str,
        body: Any = None,
        ok: tuple[int, ...] = (),
        content_type: str = "application/json",
        timeout: float = TIMEOUT_S,
    ) -> Any:
        """The decoded answer (None when empty); a status in ``ok`` counts as success. A body
        of bytes is sent as it is, as ``content_type``; any other as JSON."""
        if isinstance(body, bytes):
            data: bytes | None = body
        else:
            data = None if body is None else json.dumps(body).encode()
        headers = dict(self.headers)
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.base + path, data, headers, method=method)
        try:
            with urllib.request.urlopen(req, timeout=timeout) as resp:
                text = resp.read()
        except urllib.error.HTTPError as exc:
            if exc.code in ok:
                return None
            msg = f"{self.what} {method} {path}: {exc.code} {_message(exc.read())}"
            if exc.code >= 500:
                raise CyborgUnavailable(msg) from None
            raise CyborgRefused(msg, exc.code) from None
        except (OSError, TimeoutError) as exc:
            reason = getattr(exc, "reason", None) or exc
            raise CyborgUnavailable(f"{self.what} at {self.base} not reached: {reason}") from None
        return json.loads(text) if text.strip() else None


class CyborgClient:
    """The calls kube-acc makes, each one request."""

    def __init__(self, creds: Credentials) -> None:
        self.creds = creds
        self.cyborg = _Api(creds.cyborg_url, _headers(creds, CYBORG_VERSION), "Cyborg")
        self.placement = _Api(creds.placement_url, _headers(creds, PLACEMENT_VERSION), "Placement")

    # -- inventory ---------------------------------------------------------------------------
    def devices(self) -> list[dict[str, Any]]:
        return list(self.cyborg.call("GET", "/v2/devices")["devices"])

    def deployables(self) -> list[dict[str, Any]]:
        return list(self.cyborg.call("GET", "/v2/deployables")["deployables"])

    def deployable(self, uuid: str) -> dict[str, Any]:
        return dict(self.cyborg.call("GET", f"/v2/deployables/{urllib.parse.quote(uuid)}"))

    def program(self, deployable: str, image: str) -> None:
        """Cyborg's agent on the deployable's host loads Glance image ``image`` into it."""
        body = [{"op": "replace", "path": "/bitstream_id", "value": [{"image_uuid": image}]}]
        path = f"/v2/deployables/{urllib.parse.quote(deployable)}/program"
        self.cyborg.call("PATCH", path, body, timeout=PROGRAM_TIMEOUT_S)

    def providers(self, **query: str) -> list[dict[str, Any]]:
        q = urllib.parse.urlencode(query)
        return list(self.placement.call("GET", f"/resource_providers?{q}")["resource_providers"])

    def inventories(self, rp_uuid: str) -> dict[str, Any]:
        got = self.placement.call("GET", f"/resource_providers/{rp_uuid}/inventories")
        return dict(got["inventories"])

    def traits(self, rp_uuid: str) -> list[str]:
        return list(self.placement.call("GET", f"/resource_providers/{rp_uuid}/traits")["traits"])

    def provider_allocations(self, rp_uuid: str) -> dict[str, Any]:
        """Consumer UUID -> its resources on the provider."""
        got = self.placement.call("GET", f"/resource_providers/{rp_uuid}/allocations")
        return dict(got["allocations"])

    # -- device profiles and ARQs -------------------------------------------------------------
    def ensure_profile(self, name: str, group: dict[str, str]) -> None:
        """The device profile ``name`` with one group ``group``; made if missing."""
        q = urllib.parse.quote(name)
        if self.cyborg.call("GET", f"/v2/device_profiles?name={q}")["device_profiles"]:
            return
        body = [{"name": name, "groups": [group]}]
        self.cyborg.call("POST", "/v2/device_profiles", body, ok=(409,))

    def create_arq(self, profile: str) -> str:
        got = self.cyborg.call("POST", "/v2/accelerator_requests", {"device_profile_name": profile})
        arqs = got["arqs"]
        if len(arqs) != 1:
            raise CyborgError(f"Cyborg made {len(arqs)} ARQs for profile {profile}, not 1")
        return str(arqs[0]["uuid"])

    def arqs(self, instance: str = "") -> list[dict[str, Any]]:
        q = f"?instance={instance}" if instance else ""
        return list(self.cyborg.call("GET", f"/v2/accelerator_requests{q}")["arqs"])

    def arq(self, uuid: str) -> dict[str, Any] | None:
        got = self.cyborg.call("GET", f"/v2/accelerator_requests/{uuid}", ok=(404,))
        return None if got is None else dict(got)

    def bind(self, arqs: list[tuple[str, str]], host: str, instance: str) -> None:
        """Bind every ARQ of one instance, each ``(uuid, resource provider)``, in one request
        (Cyborg refuses a second bind of an instance that has ARQs already)."""
        patch = {
            uuid: [
                {"path": "/hostname", "op": "add", "value": host},
                {"path": "/device_rp_uuid", "op": "add", "value": rp_uuid},
                {"path": "/instance_uuid", "op": "add", "value": instance},
            ]
            for uuid, rp_uuid in arqs
        }
        self.cyborg.call("PATCH", "/v2/accelerator_requests", patch)

    def unbind(self, arqs: list[str]) -> None:
        patch = {
            uuid: [
                {"path": "/hostname", "op": "remove"},
                {"path": "/device_rp_uuid", "op": "remove"},
                {"path": "/instance_uuid", "op": "remove"},
            ]
            for uuid in arqs
        }
        self.cyborg.call("PATCH", "/v2/accelerator_requests", patch)

    def delete_arqs(self, arqs: list[str]) -> None:
        """Delete the ARQs that still exist (one missing is already gone)."""
        for uuid in arqs:
            self.cyborg.call("DELETE", f"/v2/accelerator_requests?arqs={uuid}", ok=(404,))

    # -- allocations ----------------------------------------------------------------------------
    def allocation(self, consumer: str) -> dict[str, Any]:
        return dict(self.placement.call("GET", f"/allocations/{consumer}"))

    def allocate(self, consumer: str, resources: dict[str, dict[str, int]]) -> None:
        """The consumer's allocation: resource provider -> class -> count (made or replaced);
        CyborgRefused (409) when a provider has not that much left."""
        current = self.allocation(consumer)
        body = {
            "allocations": {rp: {"resources": r} for rp, r in resources.items()},
            "project_id": self.creds.project_id or "kubeacc",
            "user_id": self.creds.user_id or "kubeacc",
            "consumer_generation": current.get("consumer_generation"),
        }
        self.placement.call("PUT", f"/allocations/{consumer}", body)

    def release(self, consumer: str) -> None:
        """The consumer's allocations gone (none is fine)."""
        self.placement.call("DELETE", f"/allocations/{consumer}", ok=(404,))
