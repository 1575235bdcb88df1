"""Deterministic identifiers (UUIDs, GUIDs, MAC addresses, serials) derived from a seed.

Nothing here is random: the same seed and label always give the same value, so two builds of a
profile are byte-identical.
"""

from __future__ import annotations

import hashlib
import uuid


def digest(seed: str, label: str) -> bytes:
    return hashlib.sha256(f"{seed}/{label}".encode()).digest()


def make_uuid(seed: str, label: str) -> str:
    """A version-4-shaped UUID string (lower case, dashed)."""
    return str(uuid.UUID(bytes=digest(seed, label)[:16], version=4))


def hex_id(seed: str, label: str, digits: int = 32) -> str:
    """``digits`` lower-case hex characters, no dashes (afu_id / interface_id style)."""
    return digest(seed, label).hex()[:digits]


def mac(seed: str, label: str, oui: str | None = None) -> str:
    """A MAC address under ``oui`` (``"b4:96:91"``), or locally administered without one."""
    raw = digest(seed, label)
    if oui:
        prefix = [int(x, 16) for x in oui.split(":")]
        octets = prefix + list(raw[: 6 - len(prefix)])
    else:
        octets = [(raw[0] & 0xFC) | 0x02, *raw[1:6]]
    return ":".join(f"{o:02x}" for o in octets)


def guid(seed: str, label: str, oui: int = 0xA088C2) -> str:
    """An InfiniBand GUID as sysfs prints it: four groups of four hex digits."""
    raw = digest(seed, label)
    value = (oui << 40) | (0x03 << 32) | int.from_bytes(raw[:4], "big")
    text = f"{value:016x}"
    return ":".join(text[i : i + 4] for i in range(0, 16, 4))


def serial(seed: str, label: str, digits: int = 13) -> str:
    """A decimal board serial number."""
    return str(int.from_bytes(digest(seed, label)[:8], "big"))[-digits:].rjust(digits, "1")
