"""The NVIDIA driver's command-line tools of the host (``nvidia-smi``,
``nvidia-cuda-mps-control``), run by the agent.

A tool is looked up in the driver's tools directory (``--driver-tools-dir``: in a Helm install
the host driver's ``bin`` directory, mounted read-only), then as ``<host-root>/usr/bin/<name>``
when the host root has it, else on the agent's PATH. The host's tools are dynamically linked and
load the driver's libraries (``libnvidia-ml.so.1``, ``libcuda.so.1``) by name: with
``--driver-library-dir`` they run with ``LD_LIBRARY_PATH`` naming a directory of links to the
driver's own libraries there (``libnvidia-*``, ``libcuda*``) and nothing else, so the host's C
library never meets the container's loader. A synthetic host's tools are launchers that need a
Python interpreter which can import kubeacc: the agent's own (:func:`tool_env`).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Seconds a tool may take (starting or stopping a daemon included).
TOOL_TIMEOUT_S = 30.0
#: The driver's libraries the tools load (``libnvidia-ml``, ``libcuda``, their helpers).
DRIVER_LIBRARIES = ("libnvidia-*.so*", "libcuda.so*", "libcudadebugger.so*")


@dataclass(frozen=True)
class DriverTools:
    """Where the node's driver tools and libraries are (``None``: not given)."""

    bin_dir: Path | None = None
    #: A directory of links to the driver's libraries only (``LD_LIBRARY_PATH`` of the tools).
    library_links: Path | None = None


#: What :func:`use_driver_tools` set for this process (the agent sets it once at start).
_CURRENT: dict[str, DriverTools] = {"driver": DriverTools()}


def driver_tools() -> DriverTools:
    return _CURRENT["driver"]


def use_driver_tools(bin_dir: Path | None, library_dir: Path | None, links: Path) -> DriverTools:
    """Use the driver tools of ``bin_dir`` and the libraries of ``library_dir`` (links to them
    are made in ``links``, replacing what it held). Raises ValueError for a missing dir."""
    for what, path in (("driver tools", bin_dir), ("driver library", library_dir)):
        if path is not None and not path.is_dir():
            raise ValueError(f"{what} directory {path} is not a directory")
    linked: Path | None = None
    if library_dir is not None:
        links.mkdir(parents=True, exist_ok=True)
        for old in links.iterdir():
            old.unlink()
        names = sorted(
            entry.name
            for entry in library_dir.iterdir()
            if any(fnmatch.fnmatch(entry.name, pat) for pat in DRIVER_LIBRARIES)
        )
        for name in names:
            (links / name).symlink_to(library_dir / name)
        log.info("driver libraries for the host tools: %d in %s", len(names), library_dir)
        linked = links
    _CURRENT["driver"] = DriverTools(bin_dir, linked)
    return _CURRENT["driver"]


class ToolError(Exception):
    """The tool is missing, hung, or answered a non-zero exit status (``status``)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


def find(host_root: Path, name: str) -> Path | None:
    bin_dir = driver_tools().bin_dir
    dirs = [bin_dir] if bin_dir is not None else []
    for directory in [*dirs, host_root / "usr" / "bin"]:
        candidate = directory / name
        if candidate.is_file() and os.access(candidate, os.X_OK):
            return candidate
    found = shutil.which(name)
    return Path(found) if found else None


def tool_env(host_root: Path) -> dict[str, str]:
    """The environment a host tool runs with."""
    if (host_root / ".synthetic").is_dir():
        from kubeacc.synthetic.tools import tool_env as synthetic_env

        env = synthetic_env(host_root)
    else:
        env = dict(os.environ)
    if (links := driver_tools().library_links) is not None:
        env["LD_LIBRARY_PATH"] = str(links)
    if (bin_dir := driver_tools().bin_dir) is not None:
        # the MPS control daemon starts nvidia-cuda-mps-server, found on its PATH
        env["PATH"] = os.pathsep.join(filter(None, [str(bin_dir), env.get("PATH", "")]))
    return env


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
