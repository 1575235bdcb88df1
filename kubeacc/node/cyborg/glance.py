"""Glance's image API, as kube-acc uses it: the bitstreams Cyborg programs, one image each.

Cyborg's program API takes a Glance image, so a bitstream from the node's library is uploaded
first: one image per bitstream content, named ``kubeacc-bitstream-<sha256>`` and carrying the
digest as the property ``kubeacc_sha256``; an active image of that name, digest and size is used
again instead of a second upload. An upload that fails part-way deletes the image it made; an
image of that name left in any other state than ``active`` (an upload cut short by a crash) is
deleted before the next upload. Same errors and credentials as
:mod:`kubeacc.node.cyborg.client`.
"""

from __future__ import annotations

import contextlib
import urllib.parse

from kubeacc.node.cyborg.client import Credentials, CyborgError, _Api, _headers

#: The image property holding the bitstream's digest.
SHA_PROPERTY = "kubeacc_sha256"


def image_name(sha256: str) -> str:
    return f"kubeacc-bitstream-{sha256}"


class GlanceImages:
    """Finds or uploads the image of one bitstream."""

    def __init__(self, creds: Credentials) -> None:
        if not creds.glance_url:
            raise CyborgError("the Cyborg credentials name no glanceUrl (Glance's image API)")
        headers = _headers(creds, "")
        headers.pop("OpenStack-API-Version")
        self.api = _Api(creds.glance_url, headers, "Glance")

    def find(self, sha256: str, size: int) -> str | None:
        """The ID of an active image holding this bitstream; removes half-made ones."""
        q = urllib.parse.urlencode({"name": image_name(sha256)})
        found = None
        for img in self.api.call("GET", f"/v2/images?{q}")["images"]:
            if img.get(SHA_PROPERTY) != sha256:
                continue
            if img.get("status") == "active" and img.get("size") == size:
                found = found or str(img["id"])
            elif img.get("status") != "active":
                self.delete(str(img["id"]))
        return found

    def upload(self, sha256: str, data: bytes) -> str:
        """A new image with ``data``; deleted again when the upload does not complete."""
        body = {
            "name": image_name(sha256),
            "disk_format": "raw",
            "container_format": "bare",
            SHA_PROPERTY: sha256,
        }
        image = str(self.api.call("POST", "/v2/images", body)["id"])
        try:
            self.api.call(
                "PUT", f"/v2/images/{image}/file", data, content_type="application/octet-stream"
            )
        except CyborgError:
            # Glance down too: the queued image of this name is deleted before the next upload
            with contextlib.suppress(CyborgError):
                self.delete(image)
            raise
        return image

    def ensure(self, sha256: str, data: bytes) -> tuple[str, bool]:
        """The image holding ``data`` (its digest ``sha256``) and whether it was uploaded now."""
        found = self.find(sha256, len(data))
        if found is not None:
            return found, False
        return self.upload(sha256, data), True

    def delete(self, image: str) -> None:
        self.api.call("DELETE", f"/v2/images/{image}", ok=(404,))
