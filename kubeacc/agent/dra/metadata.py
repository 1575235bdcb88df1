"""Device metadata for the container (KEP-5304, ``metadata.resource.k8s.io``, beta in 1.37).

What a workload may read about its devices without the API: for each request of a claim, a file
inside every container that uses the claim, at the path Kubernetes fixes
(``k8s.io/dynamic-resource-allocation/api/metadata``)::

    /var/run/kubernetes.io/dra-device-attributes/resourceclaims/<claim>/<request>/kubeacc.io-metadata.json
    /var/run/kubernetes.io/dra-device-attributes/resourceclaimtemplates/<pod claim>/<request>/...

(the second for a claim made from a template: its name is generated, so the pod's own name for
it, the annotation ``resource.kubernetes.io/pod-claim-name``, is used). The file is a stream of
the same ``DeviceMetadata`` object once per API version, newest first (``v1beta1``, then
``v1alpha1``), so a reader takes the first it understands. Each device carries its driver, pool,
name, the attributes a program needs to find it (PCI address, UUID, a MIG partition's instance
UUID and profile) and, for a NIC, the same ``networkData`` as the claim's status.

In 1.37 nothing of this is in the kubelet: a driver writes the files and a CDI mount brings them
into the container. kube-acc keeps them under ``<state-dir>/dra-device-metadata/<claim UID>/``
(a host path, as the CDI mounts need) and puts each request's mount into the CDI device of each
of its devices, so the claim's CDI spec (rewritten from the checkpoint after a restart) is the
one place that names them. They are written before the CDI spec, removed at unprepare, and
directories of claims no longer prepared are removed at start. They are derived state, like the
CDI specs: written without an fsync (that would be the largest cost of a prepare), and a file a
crash took (missing, or not a whole JSON document) is made again at start from the checkpoint,
the CDI spec's mount (which names the pod's claim name) and the devices as they are then.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.node.atomic import write_atomic

GROUP = "metadata.resource.k8s.io"
#: Newest first: the order a reader tries them in.
VERSIONS = ("v1beta1", "v1alpha1")
CONTAINER_DIR = "/var/run/kubernetes.io/dra-device-attributes"
POD_CLAIM_ANNOTATION = "resource.kubernetes.io/pod-claim-name"
SUB_DIR = "dra-device-metadata"
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")
FILE_NAME = "metadata.json"
#: ``data`` keys of a device's status entry and the attribute each is in the metadata file.
_ATTRIBUTES = {
    "pciBusID": "resource.kubernetes.io/pciBusID",
    "uuid": "uuid",
    "parentUUID": "parentUUID",
    "migProfile": "migProfile",
}


@dataclass
class RequestMetadata:
    """One request's devices as its metadata file lists them."""

    name: str
    devices: list[dict[str, Any]] = field(default_factory=list)


def base_request(request: str) -> str:
    """``gpu/high-memory`` (a sub-request) -> ``gpu``: files are per request."""
    return request.split("/", 1)[0]


def metadata_device(pool: str, device: str, entry: Mapping[str, Any]) -> dict[str, Any]:
    """A device of a metadata file, from its ``status.devices`` entry (its data, networkData)."""
    out: dict[str, Any] = {"driver": DRIVER_NAME, "pool": pool, "name": device}
    data = entry.get("data") or {}
    attrs = {_ATTRIBUTES[k]: {"string": v} for k, v in data.items() if k in _ATTRIBUTES}
    if attrs:
        out["attributes"] = attrs
    if net := entry.get("networkData"):
        out["networkData"] = dict(net)
    return out


def pod_claim_name(claim: Mapping[str, Any]) -> str | None:
    """The pod's name for a claim made from a template (None for any other claim).

    The annotation is the claim's, and a namespace user may create a claim with any annotation:
    it names a directory of the container's path, so anything but a DNS label (what a pod's
    claim name is) is refused (ValueError), never joined into a path (``../..`` would lead the
    mount anywhere in the container, over its programs)."""
    meta = claim.get("metadata") or {}
    name = (meta.get("annotations") or {}).get(POD_CLAIM_ANNOTATION)
    if name is None or name == "":
        return None
    if not isinstance(name, str) or not _DNS_LABEL.fullmatch(name):
        raise ValueError(
            f"annotation {POD_CLAIM_ANNOTATION}={str(name)[:80]!r} is not a pod claim name "
            "(a DNS label: at most 63 of a-z, 0-9 and -)"
        )
    return name


def container_path(claim: Mapping[str, Any], request: str) -> str:
    meta = claim.get("metadata") or {}
    pod_name = pod_claim_name(claim)
    if pod_name:
        where = f"resourceclaimtemplates/{pod_name}"
    else:
        where = f"resourceclaims/{meta.get('name', '')}"
    return f"{CONTAINER_DIR}/{where}/{request}/{DRIVER_NAME}-metadata.json"


def claim_dir(state_dir: Path, uid: str) -> Path:
    """Where a claim's request directories are."""
    return state_dir / SUB_DIR / uid


def host_path(state_dir: Path, uid: str, request: str) -> Path:
    return claim_dir(state_dir, uid) / request / FILE_NAME


def stream(claim: Mapping[str, Any], request: RequestMetadata) -> bytes:
    """The file of one request: the object once per version, one JSON document a line."""
    meta = claim.get("metadata") or {}
    body: dict[str, Any] = {
        "metadata": {
            "name": meta.get("name", ""),
            "namespace": meta.get("namespace", ""),
            "uid": meta.get("uid", ""),
            "generation": 1,
        },
    }
    if pod_name := pod_claim_name(claim):
        body["podClaimName"] = pod_name
    body["requests"] = [{"name": request.name, "devices": request.devices}]
    docs = [
        json.dumps({"kind": "DeviceMetadata", "apiVersion": f"{GROUP}/{v}", **body})
        for v in VERSIONS
    ]
    return "".join(d + "\n" for d in docs).encode()


def mount(state_dir: Path, claim: Mapping[str, Any], request: str) -> tuple[str, str]:
    """The read-only CDI bind mount of one request's file: (host path, container path)."""
    uid = str((claim.get("metadata") or {}).get("uid", ""))
    return str(host_path(state_dir, uid, request)), container_path(claim, request)


def files(claim: Mapping[str, Any], requests: Iterable[RequestMetadata]) -> dict[str, bytes]:
    """Each request's file content, by request name (a sub-request's file is its request's)."""
    return {base_request(r.name): stream(claim, r) for r in requests}


def write(state_dir: Path, uid: str, contents: Mapping[str, bytes]) -> None:
    """Write a claim's files (each replaced whole; no fsync, see above); OSError when one
    cannot be."""
    if contents:
        _mkdir(claim_dir(state_dir, uid))
    for request, data in contents.items():
        path = host_path(state_dir, uid, request)
        _mkdir(path.parent)
        write_atomic(path, data, 0o644, durable=False)


def _mkdir(path: Path) -> None:
    """``path`` and its parents: one system call where only ``path`` is missing."""
    try:
        os.mkdir(path)
    except FileExistsError:
        pass
    except FileNotFoundError:
        path.mkdir(parents=True, exist_ok=True)


def mounted(state_dir: Path, uid: str, spec: Mapping[str, Any]) -> dict[str, str]:
    """Request -> container path, of the metadata mounts in a claim's CDI spec."""
    out = {}
    for dev in spec.get("devices") or []:
        for m in (dev.get("containerEdits") or {}).get("mounts") or []:
            host = Path(str(m.get("hostPath", "")))
            if host.name == FILE_NAME and host.parent.parent == claim_dir(state_dir, uid):
                out[host.parent.name] = str(m.get("containerPath", ""))
    return out


def whole(state_dir: Path, uid: str, request: str) -> bool:
    """Is the request's file there and its first line a JSON document?"""
    try:
        first = host_path(state_dir, uid, request).read_bytes().split(b"\n", 1)[0]
        json.loads(first)
    except (OSError, ValueError):
        return False
    return True


def claim_object(namespace: str, name: str, uid: str, paths: Mapping[str, str]) -> dict[str, Any]:
    """The claim as far as its files need it, from the checkpoint and the mounts' container
    ``paths`` (a template claim's pod claim name is in them)."""
    meta: dict[str, Any] = {"name": name, "namespace": namespace, "uid": uid}
    marker = f"{CONTAINER_DIR}/resourceclaimtemplates/"
    for path in paths.values():
        if path.startswith(marker):
            meta["annotations"] = {POD_CLAIM_ANNOTATION: path[len(marker) :].split("/", 1)[0]}
    return {"metadata": meta}


def remove(state_dir: Path, uid: str) -> None:
    """Remove a claim's files and directories. Each request directory holds its one file, so
    they go by name (a system call each: at unprepare, ``shutil.rmtree``'s walk cost more than
    the rest of the call); anything else found there falls back to the walk."""
    top = f"{os.fspath(state_dir)}/{SUB_DIR}/{uid}"  # claim_dir, without pathlib's objects
    try:
        requests = os.listdir(top)
    except FileNotFoundError:
        return  # prepared without metadata, or removed already
    except OSError:
        shutil.rmtree(top, ignore_errors=True)  # not a directory we can list: the walk decides
        return
    try:
        for request in requests:
            where = os.path.join(top, request)
            os.unlink(os.path.join(where, FILE_NAME))
            os.rmdir(where)
        os.rmdir(top)
    except OSError:
        shutil.rmtree(top, ignore_errors=True)


def leftovers(state_dir: Path, prepared: Iterable[str]) -> list[str]:
    """Remove the directories of claims not in ``prepared``; their UIDs."""
    root = state_dir / SUB_DIR
    keep = set(prepared)
    gone = sorted(p.name for p in root.iterdir() if p.name not in keep) if root.is_dir() else []
    for uid in gone:
        remove(state_dir, uid)
    return gone
