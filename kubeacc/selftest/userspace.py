"""The self test's checks of the NVIDIA driver user space and kube-acc's CDI specs against
what is really on the host (docs/selftest.md).

The specs' paths are the container runtime's (host paths), checked as such.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from kubeacc.node.userspace.nvidia import DriverRootError
from kubeacc.node.userspace.provider import DriverUserSpace
from kubeacc.selftest.report import Check, failed, passed, skipped, verdict

VERSION_ENV = "KUBEACC_NVIDIA_DRIVER_VERSION="
SPEC_GLOB = "kubeacc.io-*.json"


def user_space_checks(us: DriverUserSpace) -> tuple[list[Check], str | None]:
    """The driver user space found, every file of it present; (checks, driver version)."""
    try:
        found = us.find()
    except DriverRootError as exc:
        return [failed("NVIDIA driver user space", str(exc))], None
    out = [
        passed(
            "NVIDIA driver user space",
            f"driver {found.version}, {len(found.libraries)} libraries in {found.library_dir}"
            + (f"; absent: {', '.join(found.absent)}" if found.absent else ""),
        )
    ]
    for path in (*found.files, *found.sockets):
        host = us.where / path.lstrip("/")
        out.append(verdict(f"driver file {path}", host.exists(), str(host)))
    return out, found.version


def spec_checks(cdi_dir: Path, version: str | None) -> list[Check]:
    """Every file a kube-acc CDI spec names exists; its driver version is the loaded one."""
    out = []
    specs = sorted(cdi_dir.glob(SPEC_GLOB))
    if not specs:
        return [skipped(f"CDI specs in {cdi_dir}", "none: no claim prepared on this node")]
    for spec_path in specs:
        try:
            spec = json.loads(spec_path.read_bytes())
        except (OSError, ValueError) as exc:
            out.append(failed(f"CDI spec {spec_path.name}", str(exc)))
            continue
        missing, versions = [], set()
        for edits in _edits(spec):
            for path in _paths(edits):
                if not os.path.lexists(path):
                    missing.append(path)
            versions |= {
                e[len(VERSION_ENV) :] for e in edits.get("env") or [] if e.startswith(VERSION_ENV)
            }
        out.append(
            verdict(
                f"CDI spec {spec_path.name}: files",
                not missing,
                f"missing: {', '.join(missing)}" if missing else "every file it names exists",
            )
        )
        if versions:
            good = versions == {version}
            out.append(
                verdict(
                    f"CDI spec {spec_path.name}: driver version",
                    good,
                    f"spec {', '.join(sorted(versions))}, loaded module {version or 'none'}",
                )
            )
    return out


def _edits(spec: dict[str, Any]) -> Iterator[dict[str, Any]]:
    if spec.get("containerEdits"):
        yield spec["containerEdits"]
    for dev in spec.get("devices") or []:
        if dev.get("containerEdits"):
            yield dev["containerEdits"]


def _paths(edits: dict[str, Any]) -> Iterator[str]:
    for m in edits.get("mounts") or []:
        yield m["hostPath"]
    for n in edits.get("deviceNodes") or []:
        yield n.get("hostPath") or n["path"]
    for h in edits.get("hooks") or []:
        yield h["path"]
