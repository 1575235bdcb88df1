"""Container images for the real-runtime testbed, written here as OCI image-layout tarballs.

No registry is reachable, so every image a pod of the real-runtime testbed runs is made on this
machine and imported into containerd (``ctr images import``). One layer holds a statically
linked busybox (Debian's ``busybox-static``, ``/bin/busybox``) and the applet links the tests
use; two images share it:

* :data:`WORKLOAD_IMAGE` — the tiny workload image (default command ``sh``);
* :data:`PAUSE_IMAGE` — the pod sandbox ("pause") image: ``sleep`` for ever as PID 1.

The tarballs are byte-for-byte reproducible (fixed timestamps, owners and order), so the same
busybox gives the same image digests.
"""

from __future__ import annotations

import hashlib
import io
import json
import platform
import tarfile
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: Where Debian's busybox-static puts its binary.
BUSYBOX = Path("/bin/busybox")
WORKLOAD_IMAGE = "kubeacc.local/busybox:1"
PAUSE_IMAGE = "kubeacc.local/pause:1"
#: Applets linked into /bin (what pods of the tests call by name).
APPLETS = (
    "sh",
    "env",
    "ls",
    "cat",
    "echo",
    "sleep",
    "stat",
    "test",
    "true",
    "false",
    "printf",
    "grep",
    "sort",
)
_MEDIA_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
_MEDIA_CONFIG = "application/vnd.oci.image.config.v1+json"
_MEDIA_LAYER = "application/vnd.oci.image.layer.v1.tar"
#: A long sleep (busybox's sleep takes seconds; 68 years is for ever enough).
_FOREVER = "2147483647"


class ImageError(RuntimeError):
    """An image cannot be made (no static busybox on this machine)."""


@dataclass(frozen=True)
class Image:
    """One image: its reference, the tarball, and the manifest digest."""

    name: str
    tarball: Path
    digest: str


def oci_arch() -> str:
    machine = platform.machine()
    return {"x86_64": "amd64", "aarch64": "arm64"}.get(machine, machine)


def _digest(data: bytes) -> str:
    return "sha256:" + hashlib.sha256(data).hexdigest()


def _json(obj: Any) -> bytes:
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def _tar_add(tar: tarfile.TarFile, name: str, data: bytes | None = None, **kw: Any) -> None:
    info = tarfile.TarInfo(name)
    info.mtime = 0
    info.uid = info.gid = 0
    info.uname = info.gname = "root"
    for key, value in kw.items():
        setattr(info, key, value)
    if data is not None:
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    else:
        tar.addfile(info)


def busybox_layer(busybox: Path = BUSYBOX) -> bytes:
    """The image's only layer: /bin/busybox, applet links, empty /dev /proc /sys /tmp /etc."""
    try:
        binary = busybox.read_bytes()
    except OSError as exc:
        raise ImageError(
            f"{busybox}: {exc.strerror or exc}; install Debian's busybox-static "
            "(scripts/bootstrap.sh does)"
        ) from None
    if binary[:4] != b"\x7fELF":
        raise ImageError(f"{busybox} is not an ELF binary")
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w", format=tarfile.PAX_FORMAT) as tar:
        for d in ("bin", "dev", "etc", "proc", "sys", "tmp"):
            _tar_add(tar, d + "/", type=tarfile.DIRTYPE, mode=0o1777 if d == "tmp" else 0o755)
        _tar_add(tar, "bin/busybox", binary, mode=0o755)
        for applet in APPLETS:
            _tar_add(tar, f"bin/{applet}", type=tarfile.SYMTYPE, linkname="busybox", mode=0o777)
        _tar_add(tar, "etc/passwd", b"root:x:0:0:root:/:/bin/sh\n", mode=0o644)
        _tar_add(tar, "etc/group", b"root:x:0:\n", mode=0o644)
    return buf.getvalue()


def write_image(
    name: str,
    command: list[str],
    layer: bytes | Path,
    target: Path,
    arch: str | None = None,
    config: dict[str, Any] | None = None,
) -> Image:
    """Write ``name`` (one layer, default command ``command``) as an OCI layout tarball.

    ``layer`` is the layer tar itself or a file holding it (large layers are streamed);
    ``config`` replaces entries of the image configuration's ``config`` (Env, User, ...).
    """
    arch = arch or oci_arch()
    if isinstance(layer, Path):
        layer_digest, layer_size = _file_digest(layer), layer.stat().st_size
    else:
        layer_digest, layer_size = _digest(layer), len(layer)
    image_config: dict[str, Any] = {"Cmd": command, "Env": ["PATH=/bin"], "WorkingDir": "/"}
    image_config.update(config or {})
    config_blob = _json(
        {
            "architecture": arch,
            "os": "linux",
            "config": image_config,
            "rootfs": {"type": "layers", "diff_ids": [layer_digest]},
        }
    )
    manifest = _json(
        {
            "schemaVersion": 2,
            "mediaType": _MEDIA_MANIFEST,
            "config": {
                "mediaType": _MEDIA_CONFIG,
                "digest": _digest(config_blob),
                "size": len(config_blob),
            },
            "layers": [{"mediaType": _MEDIA_LAYER, "digest": layer_digest, "size": layer_size}],
        }
    )
    index = _json(
        {
            "schemaVersion": 2,
            "manifests": [
                {
                    "mediaType": _MEDIA_MANIFEST,
                    "digest": _digest(manifest),
                    "size": len(manifest),
                    "platform": {"architecture": arch, "os": "linux"},
                    "annotations": {
                        "io.containerd.image.name": name,
                        "org.opencontainers.image.ref.name": name.rsplit(":", 1)[-1],
                    },
                }
            ],
        }
    )
    target.parent.mkdir(parents=True, exist_ok=True)
    with tarfile.open(target, "w", format=tarfile.PAX_FORMAT) as tar:
        _tar_add(tar, "oci-layout", _json({"imageLayoutVersion": "1.0.0"}), mode=0o644)
        _tar_add(tar, "index.json", index, mode=0o644)
        _tar_add(tar, "blobs/", type=tarfile.DIRTYPE, mode=0o755)
        _tar_add(tar, "blobs/sha256/", type=tarfile.DIRTYPE, mode=0o755)
        if isinstance(layer, Path):
            info = tarfile.TarInfo(f"blobs/sha256/{layer_digest[7:]}")
            info.size, info.mode = layer_size, 0o644
            with layer.open("rb") as fh:
                tar.addfile(info, fh)
        else:
            _tar_add(tar, f"blobs/sha256/{layer_digest[7:]}", layer, mode=0o644)
        for blob in (config_blob, manifest):
            _tar_add(tar, f"blobs/sha256/{_digest(blob)[7:]}", blob, mode=0o644)
    return Image(name, target, _digest(manifest))


def _file_digest(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for chunk in iter(lambda: fh.read(1 << 20), b""):
            h.update(chunk)
    return "sha256:" + h.hexdigest()


def build_images(directory: Path, busybox: Path = BUSYBOX) -> list[Image]:
    """The workload and pause images as tarballs in ``directory``."""
    layer = busybox_layer(busybox)
    return [
        write_image(WORKLOAD_IMAGE, ["sh"], layer, directory / "busybox.tar"),
        write_image(PAUSE_IMAGE, ["sleep", _FOREVER], layer, directory / "pause.tar"),
    ]
