"""Copy a file of the agent's image to a host path (the state directory), for CDI specs.

The agent runs in a container, but a CDI spec's ``hostPath`` (a mounted file, a hook's
program) names a file of the host; the state directory is the same path in both.
"""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

from kubeacc.node.atomic import write_atomic

log = logging.getLogger(__name__)


def copy_to_host(source: Path, target: Path) -> Path:
    """``target``, with ``source``'s bytes (kept when already the same), mode 0755; OSError
    when ``source`` cannot be read or ``target`` written."""
    data = source.read_bytes()
    try:
        if target.read_bytes() == data:
            return target
    except OSError:
        pass
    target.parent.mkdir(parents=True, exist_ok=True)
    write_atomic(target, data, durable=False)
    target.chmod(0o755)
    log.info("%s (sha256 %s)", target, hashlib.sha256(data).hexdigest()[:12])
    return target


def install(source: Path | None, image_file: Path, state_dir: Path, without: str) -> Path | None:
    """Copy ``source`` (default: the image's ``image_file``) to ``<state-dir>/native``; its
    path there, or None (logged with ``without``, what the node lacks then)."""
    src = source or image_file
    try:
        return copy_to_host(src, state_dir / "native" / image_file.name)
    except OSError as exc:
        level = logging.WARNING if source is not None else logging.INFO
        log.log(level, "%s: %s; %s", src, exc, without)
        return None
