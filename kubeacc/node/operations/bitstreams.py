"""The node-local FPGA bitstream library.

Operations name a bitstream by its path *inside* the library and its SHA-256. ``resolve`` makes
sure the name cannot leave the library (absolute paths, ``..`` and symlinks pointing outside are
refused), ``load`` checks the digest and reads the Intel GBS header: a 16-byte GUID
(``XeonFPGA·GBSv001``), a little-endian u32 metadata length, JSON metadata naming the AFU
(``accelerator-type-uuid``) and the FIM it was built for (``interface-uuid``), then the partial
bitstream itself, which is what the PR ioctl receives.
"""

from __future__ import annotations

import hashlib
import json
import re
import struct
from pathlib import Path, PurePosixPath
from typing import Any

from kubeacc.host.kernel import FpgaImage, HostError

GBS_GUID = b"XeonFPGA\xb7GBSv001"  # 58656f6e-4650-4741-b747-425376303031
_UUID = re.compile(r"^[0-9a-f]{32}$")
_MAX_BITSTREAM = 512 * 1024 * 1024


def _norm_uuid(value: Any) -> str:
    text = str(value).replace("-", "").lower()
    if not _UUID.match(text):
        raise HostError("InvalidBitstream", f"not a UUID in GBS metadata: {value!r}")
    return text


def make_gbs(afu_id: str, interface_id: str, payload: bytes, name: str = "afu") -> bytes:
    """Build a GBS file (used by tests and demos; real ones come from the FPGA tool flow)."""

    def dashed(u: str) -> str:
        u = _norm_uuid(u)
        return f"{u[:8]}-{u[8:12]}-{u[12:16]}-{u[16:20]}-{u[20:]}"

    meta = {
        "version": 1,
        "afu-image": {
            "interface-uuid": dashed(interface_id),
            "magic-no": 488605312,
            "accelerator-clusters": [
                {"name": name, "total-contexts": 1, "accelerator-type-uuid": dashed(afu_id)}
            ],
        },
    }
    blob = json.dumps(meta).encode()
    return GBS_GUID + struct.pack("<I", len(blob)) + blob + payload


class BitstreamLibrary:
    def __init__(self, root: Path) -> None:
        self.root = Path(root)

    def resolve(self, name: str) -> Path:
        rel = PurePosixPath(name)
        if not name or rel.is_absolute() or any(p in ("..", ".", "") for p in name.split("/")):
            raise HostError(
                "InvalidBitstreamName", f"bitstream name {name!r} must stay inside the library"
            )
        base = self.root.resolve()
        candidate = self.root / rel
        try:
            real = candidate.resolve(strict=True)
        except (OSError, RuntimeError):
            raise HostError("BitstreamNotFound", f"no bitstream {name!r} in the library") from None
        if not real.is_relative_to(base):
            raise HostError(
                "InvalidBitstreamName", f"bitstream {name!r} resolves outside the library"
            )
        if not real.is_file():
            raise HostError("BitstreamNotFound", f"{name!r} is not a regular file")
        return real

    def load(self, name: str, sha256: str) -> FpgaImage:
        return self.read(name, sha256)[1]

    def read(self, name: str, sha256: str) -> tuple[bytes, FpgaImage]:
        """The file's bytes, checked against ``sha256``, and its parsed header (the bytes that
        were checked, for a caller that hands the whole file on)."""
        path = self.resolve(name)
        if path.stat().st_size > _MAX_BITSTREAM:
            raise HostError("InvalidBitstream", f"{name}: larger than {_MAX_BITSTREAM} bytes")
        data = path.read_bytes()
        digest = hashlib.sha256(data).hexdigest()
        if digest != sha256:
            raise HostError(
                "DigestMismatch",
                f"{name}: sha256 is {digest}, the operation expects {sha256}",
            )
        return data, parse_gbs(name, digest, data)


def parse_gbs(name: str, digest: str, data: bytes) -> FpgaImage:
    if len(data) < 20 or data[:16] != GBS_GUID:
        raise HostError("InvalidBitstream", f"{name}: not a GBS file (bad GUID)")
    (length,) = struct.unpack_from("<I", data, 16)
    if 20 + length > len(data):
        raise HostError("InvalidBitstream", f"{name}: metadata length {length} past end of file")
    try:
        meta = json.loads(data[20 : 20 + length])
        image = meta["afu-image"]
        afu = _norm_uuid(image["accelerator-clusters"][0]["accelerator-type-uuid"])
        iface = image.get("interface-uuid")
    except (ValueError, KeyError, IndexError, TypeError) as exc:
        raise HostError("InvalidBitstream", f"{name}: bad GBS metadata: {exc}") from None
    payload = data[20 + length :]
    if not payload:
        raise HostError("InvalidBitstream", f"{name}: no bitstream after the metadata")
    return FpgaImage(
        name=name,
        sha256=digest,
        afu_id=afu,
        interface_id=_norm_uuid(iface) if iface else None,
        payload=payload,
    )


def check_allowed(device_name: str, bitstream: str, sha256: str, allowed: set[str]) -> None:
    """Refuse a bitstream whose digest no policy of the device allows (host and Cyborg alike)."""
    if sha256 not in allowed:
        raise HostError(
            "BitstreamNotAllowed",
            f"{bitstream} (sha256 {sha256[:12]}…) is not allowed by the policies of {device_name}",
        )
