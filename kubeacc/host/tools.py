"""The NVIDIA driver's command-line tools of the host (``nvidia-smi``,
``nvidia-cuda-mps-control``), run by the agent.

A tool is looked up in the driver's tools directory (``--driver-tools-dir``: in a Helm install
the host driver's ``bin`` directory, mounted read-only), then as ``<host-root>/usr/bin/<name>``
when the host root has it, else on the agent's PATH. The host's tools are dynamically linked and
load the driver's libraries (``libnvidia-ml.so.1``, ``libcuda.so.1``) by name: with
``--driver-library-dir`` they run with ``LD_LIBRARY_PATH`` naming a directory of links to the
driver's own libraries there (``libnvidia-*``, ``libcuda*``) and nothing else, so the host's C
library never meets the container's loader. What else a host's tools need in their environment
is the host's to say (:attr:`HostTools.defaults`; a synthetic host's launchers need a Python
interpreter that can import kubeacc).
"""

from __future__ import annotations

import fnmatch
import logging
import os
import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

import msgspec

log = logging.getLogger(__name__)

#: Seconds a tool may take (starting or stopping a daemon included).
TOOL_TIMEOUT_S = 30.0
#: The driver's libraries the tools load (``libnvidia-ml``, ``libcuda``, their helpers).
DRIVER_LIBRARIES = ("libnvidia-*.so*", "libcuda.so*", "libcudadebugger.so*")


class DriverTools(msgspec.Struct, frozen=True):
    """Where the node's driver tools and libraries are (``None``: not given)."""

    bin_dir: Path | None = None
    #: A directory of links to the driver's libraries only (``LD_LIBRARY_PATH`` of the tools).
    library_links: Path | None = None


def use_driver_tools(bin_dir: Path | None, library_dir: Path | None, links: Path) -> DriverTools:
    """The driver tools of ``bin_dir`` and the libraries of ``library_dir`` (links to them
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
    return DriverTools(bin_dir, linked)


class ToolError(Exception):
    """The tool is missing, hung, or answered a non-zero exit status (``status``)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class HostTools(msgspec.Struct, frozen=True):
    """The driver tools of one host root."""

    root: Path
    driver: DriverTools = DriverTools()
    #: Environment variables the host's tools get unless the agent's environment sets them.
    defaults: Mapping[str, str] = msgspec.field(default_factory=dict)

    def find(self, name: str) -> Path | None:
        bin_dir = self.driver.bin_dir
        dirs = [bin_dir] if bin_dir is not None else []
        for directory in [*dirs, self.root / "usr" / "bin"]:
            candidate = directory / name
            if candidate.is_file() and os.access(candidate, os.X_OK):
                return candidate
        found = shutil.which(name)
        return Path(found) if found else None

    def env(self) -> dict[str, str]:
        """The environment a host tool runs with."""
        env = {**self.defaults, **os.environ}
        if (links := self.driver.library_links) is not None:
            env["LD_LIBRARY_PATH"] = str(links)
        if (bin_dir := self.driver.bin_dir) is not None:
            # the MPS control daemon starts nvidia-cuda-mps-server, found on its PATH
            env["PATH"] = os.pathsep.join(filter(None, [str(bin_dir), env.get("PATH", "")]))
        return env

    def run(
        self,
        name: str,
        args: Sequence[str],
        *,
        env: Mapping[str, str] | None = None,
        stdin: str = "",
    ) -> str:
        """Run ``name args`` and return its standard output; ToolError names what went wrong
        (the tool's last line of output when it failed)."""
        tool = self.find(name)
        if tool is None:
            raise ToolError(f"{name} not found")
        try:
            done = subprocess.run(
                [str(tool), *args],
                input=stdin,
                env={**self.env(), **(env or {})},
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
