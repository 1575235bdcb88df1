"""The NVIDIA driver's command-line tools of the host (``nvidia-smi``,
``nvidia-cuda-mps-control``), run by the agent.

A tool is ``<host-root>/usr/bin/<name>`` when the host root has it, else the one on the agent's
PATH. A synthetic host's tools are launchers that need a Python interpreter which can import
kubeacc: the agent's own (:func:`tool_env`).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

#: Seconds a tool may take (starting or stopping a daemon included).
TOOL_TIMEOUT_S = 30.0


class ToolError(Exception):
    """The tool is missing, hung, or answered a non-zero exit status (``status``)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def find(host_root: Path, name: str) -> Path | None:
    candidate = host_root / "usr" / "bin" / name
    if candidate.is_file() and os.access(candidate, os.X_OK):
        return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def tool_env(host_root: Path) -> dict[str, str]:
    """The environment a host tool runs with."""
    if (host_root / ".synthetic").is_dir():
        from kubeacc.synthetic.tools import tool_env as synthetic_env

        return synthetic_env(host_root)
    return dict(os.environ)


def run(
    host_root: Path,
    name: str,
    args: Sequence[str],
    *,
    env: Mapping[str, str] | None = None,
    stdin: str = "",
) -> str:
    """Run ``name args`` and return its standard output; ToolError names what went wrong
    (the tool's last line of output when it failed)."""
    tool = find(host_root, name)
    if tool is None:
        raise ToolError(f"{name} not found")
    try:
        done = subprocess.run(
            [str(tool), *args],
            input=stdin,
            env={**tool_env(host_root), **(env or {})},
            capture_output=True,
            text=True,
            timeout=TOOL_TIMEOUT_S,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise ToolError(f"{name}: {exc}") from None
    if done.returncode != 0:
        lines = (done.stderr or done.stdout).strip().splitlines()
        command = " ".join([name, *args[:1]])
        raise ToolError(
            f"{command} failed (exit status {done.returncode}): "
            f"{lines[-1] if lines else 'no message'}",
            done.returncode,
        )
    return done.stdout
