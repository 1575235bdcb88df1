"""CDI specs, one JSON file per prepared claim.

Kind ``kubeacc.io/claim``; each allocated device is a CDI device named ``<claim-uid>-<device>``
(a share of a memory-shared GPU: ``<claim-uid>-<device>-<share-id>``), so the fully-qualified id
the kubelet hands the runtime is ``kubeacc.io/claim=<claim-uid>-<device>``. Claim-wide edits
(``ACCELERATOR_UNITS``, the claim's name) sit in the spec's top-level ``containerEdits``, which a
runtime applies whenever it injects any device of the spec.
"""

from __future__ import annotations

import contextlib
import os
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import msgspec

from kubeacc.node.atomic import write_atomic
from kubeacc.node.userspace.groups import cdi_version, node_group

CDI_VERSION = "0.6.0"
CDI_KIND = "kubeacc.io/claim"
SPEC_PREFIX = "kubeacc.io-claim_"
DEFAULT_CDI_DIR = Path("/var/run/cdi")
_SPEC_RE = re.compile(r"^kubeacc\.io-claim_(?P<uid>[A-Za-z0-9-]+)\.json$")
#: A spec's encoding: keys sorted (one byte form per spec), then indented for the reader.
_SORTED = msgspec.json.Encoder(order="sorted").encode


class CDIDevice(msgspec.Struct, frozen=True):
    """One device of a claim as the container should see it."""

    name: str  # slice device name
    bus_id: str
    device_nodes: tuple[str, ...] = ()
    env: Mapping[str, str] = msgspec.field(default_factory=dict)
    #: The allocation's shareID when the claim has a share of a memory-shared device.
    share_id: str = ""
    #: Bind mounts, ``(host path, container path)`` (the MPS pipe directory).
    mounts: tuple[tuple[str, str], ...] = ()
    #: Read-only bind mounts (the share-limit library).
    read_only_mounts: tuple[tuple[str, str], ...] = ()

    def cdi_name(self, claim_uid: str) -> str:
        return cdi_name(claim_uid, self.name, self.share_id)


def cdi_name(claim_uid: str, device: str, share_id: str = "") -> str:
    """The CDI device name of ``device`` (or of one share of it) in the claim's spec."""
    return f"{claim_uid}-{device}-{share_id}" if share_id else f"{claim_uid}-{device}"


def device_id(claim_uid: str, device: str, share_id: str = "") -> str:
    """The fully-qualified CDI device id for ``device`` (or one share of it) of the claim."""
    return f"{CDI_KIND}={cdi_name(claim_uid, device, share_id)}"


def spec_path(cdi_dir: Path, claim_uid: str) -> Path:
    return cdi_dir / f"{SPEC_PREFIX}{claim_uid}.json"


def build_spec(
    claim_uid: str,
    claim_ref: str,
    devices: Sequence[CDIDevice],
    device_root: Path = Path("/"),
    claim_edits: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """The claim's spec; ``claim_edits``: more claim-wide container edits (the driver's user
    space, :mod:`kubeacc.node.userspace`)."""
    units = ",".join(d.bus_id for d in devices if d.bus_id)
    cdi_devices = []
    gids: set[int] = set()
    for d in devices:
        edits: dict[str, Any] = {}
        if d.device_nodes:
            edits["deviceNodes"] = [device_node(p, device_root) for p in d.device_nodes]
            gids |= node_gids(edits["deviceNodes"])
        env = [f"KUBEACC_DEVICE_{_env_suffix(d.name)}={d.bus_id}"]
        env += [f"{k}={v}" for k, v in sorted(d.env.items())]
        edits["env"] = env
        mounts = [(h, c, "rw") for h, c in d.mounts] + [(h, c, "ro") for h, c in d.read_only_mounts]
        if mounts:
            edits["mounts"] = [
                {"hostPath": h, "containerPath": c, "options": [mode, "nosuid", "nodev", "bind"]}
                for h, c, mode in mounts
            ]
        cdi_devices.append({"name": d.cdi_name(claim_uid), "containerEdits": edits})
    base: dict[str, Any] = {"env": [f"ACCELERATOR_UNITS={units}", f"KUBEACC_CLAIM={claim_ref}"]}
    if gids:
        base["additionalGids"] = sorted(gids)
    return {
        "cdiVersion": cdi_version(CDI_VERSION, gids),
        "kind": CDI_KIND,
        "devices": cdi_devices,
        "containerEdits": merge(base, claim_edits or {}),
    }


def merge(base: Mapping[str, Any], more: Mapping[str, Any]) -> dict[str, Any]:
    """``containerEdits`` with the lists of ``more`` appended to those of ``base``."""
    out = dict(base)
    for key, items in more.items():
        out[key] = [*out.get(key, []), *items]
    return out


def _env_suffix(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "_", name).upper()


def device_node(path: str, device_root: Path) -> dict[str, Any]:
    """A CDI device node: ``path`` in the container, ``<device_root>/<path>`` on the host.

    The runtime (containerd on the host) opens ``hostPath``, so ``device_root`` is where the
    device nodes are in the *host's* file system view: ``/`` on a real node, whatever the
    agent's own ``--host-root`` is (the synthetic ``/sys`` tree of a test node holds regular
    files, not device nodes). A test node points it at a directory of real ``mknod`` nodes.
    """
    entry: dict[str, Any] = {"path": path}
    if device_root != Path("/"):
        entry["hostPath"] = str(device_root / path.lstrip("/"))
    gid = node_group(path, device_root)
    if gid is not None:
        entry["gid"] = gid  # the host's group (kubeacc.node.userspace.groups)
    return entry


def node_gids(nodes: Sequence[Mapping[str, Any]]) -> set[int]:
    """The groups of device node entries (``additionalGids`` of the container)."""
    return {int(n["gid"]) for n in nodes if "gid" in n}


def write_spec(cdi_dir: Path, claim_uid: str, spec: Mapping[str, Any]) -> Path:
    """Write the spec so that it is complete or absent: temp file, every byte written and its
    size checked, rename. OSError (full, read-only) leaves no file behind.

    Not flushed to the disk: the checkpoint is the durable record, and the plugin rewrites
    any missing, damaged or different spec from it before it serves the kubelet again (the
    usual CDI directory, /var/run/cdi, is a tmpfs that does not outlive a reboot anyway).
    Flushing spec and directory would add two flushes to every prepare (p50 2.7 -> 8.5 ms).
    """
    path = spec_path(cdi_dir, claim_uid)
    write_atomic(path, msgspec.json.format(_SORTED(spec), indent=1), durable=False)
    return path


def remove_spec(cdi_dir: Path, claim_uid: str) -> bool:
    return _remove(spec_path(cdi_dir, claim_uid))


def set_aside(cdi_dir: Path, claim_uid: str) -> bool:
    """First step of removing a spec: rename it to a name no CDI registry reads.

    A rename needs no free space, so :func:`put_back` can always undo it (the unprepare failed)
    and :func:`discard` finishes it. True if there was a spec.
    """
    top = os.fspath(cdi_dir)  # str paths: pathlib's objects cost as much as the rename itself
    try:
        os.rename(f"{top}/{SPEC_PREFIX}{claim_uid}.json", _aside(top, claim_uid))
    except FileNotFoundError:
        return False
    return True


def put_back(cdi_dir: Path, claim_uid: str) -> None:
    aside_path(cdi_dir, claim_uid).rename(spec_path(cdi_dir, claim_uid))


def discard(cdi_dir: Path, claim_uid: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.unlink(_aside(os.fspath(cdi_dir), claim_uid))


def _remove(path: Path) -> bool:
    """Delete a spec file (not flushed either, see write_spec); True if it existed."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    return True


def aside_path(cdi_dir: Path, claim_uid: str) -> Path:
    return Path(_aside(os.fspath(cdi_dir), claim_uid))


def _aside(top: str, claim_uid: str) -> str:
    return f"{top}/.{SPEC_PREFIX}{claim_uid}.json.removing"


def leftovers(cdi_dir: Path) -> list[Path]:
    """Files an interrupted write or removal leaves (``.*.tmp``, ``.*.removing``)."""
    return [*cdi_dir.glob(".*.tmp"), *cdi_dir.glob(".*.removing")]


def spec_uids(cdi_dir: Path) -> set[str]:
    """Claim UIDs of every spec this driver has in ``cdi_dir``."""
    out = set()
    if cdi_dir.is_dir():
        for p in cdi_dir.iterdir():
            m = _SPEC_RE.match(p.name)
            if m:
                out.add(m.group("uid"))
    return out
