"""Claim references as the kubelet sends them, checked before anything is read or changed.

The UID names files (``kubeacc.io-claim_<uid>.json``) and CDI devices, the namespace and name
name an API path: each must have Kubernetes syntax and length, so a hostile value (a NUL byte,
a ``/``, 300 characters, an empty name that would turn a GET into a LIST) gets its own error and
touches nothing.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

#: RFC 1123 label (namespaces): at most 63 characters.
_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
#: RFC 1123 subdomain (object names): dot-separated labels, at most 253 characters.
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")
#: Object UIDs: the API server makes RFC 4122 UUIDs; letters, digits and dashes, at most 128.
_UID = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9]{0,126}[A-Za-z0-9])?")


@dataclass(frozen=True)
class ClaimRef:
    namespace: str
    name: str
    uid: str


def _show(value: str) -> str:
    """A value for an error message: quoted, escaped, shortened."""
    return repr(value) if len(value) <= 64 else repr(value[:64])[:-1] + "...'"


def ref_error(ref: ClaimRef) -> str:
    """Why ``ref`` cannot name a ResourceClaim ("" if it can)."""
    if not _UID.fullmatch(ref.uid):
        return f"claim UID {_show(ref.uid)} is not a Kubernetes UID"
    if not _LABEL.fullmatch(ref.namespace):
        return f"claim namespace {_show(ref.namespace)} is not a Kubernetes namespace name"
    if len(ref.name) > 253 or not _SUBDOMAIN.fullmatch(ref.name):
        return f"claim name {_show(ref.name)} is not a Kubernetes object name"
    return ""
