"""``{multiarch}`` in a library path: the Debian multiarch directory of the machine the command
runs on (``x86_64-linux-gnu``, ``aarch64-linux-gnu``).

The chart runs one multi-arch image on x86-64 and Arm64 nodes alike, and a pod cannot learn
its node's architecture from the downward API; the agent, running natively, knows it. So the
chart passes ``--nvml-library=/run/kubeacc/nvidia-lib/{multiarch}/libnvidia-ml.so.1`` (the
host's ``<driver root>/usr/lib`` mounted there), and each node's agent takes its own
directory.
"""

from __future__ import annotations

import platform
from pathlib import Path

PLACEHOLDER = "{multiarch}"
TRIPLETS = {
    "x86_64": "x86_64-linux-gnu",
    "aarch64": "aarch64-linux-gnu",
    "arm64": "aarch64-linux-gnu",
}


class MultiarchError(ValueError):
    """The machine's architecture has no multiarch directory kube-acc knows."""


def multiarch(machine: str | None = None) -> str:
    m = machine or platform.machine()
    try:
        return TRIPLETS[m]
    except KeyError:
        raise MultiarchError(
            f"no multiarch library directory for machine {m!r} (known: "
            f"{', '.join(sorted(set(TRIPLETS)))}): name the library path without {PLACEHOLDER}"
        ) from None


def expand(path: Path | None, machine: str | None = None) -> Path | None:
    """``path`` with ``{multiarch}`` replaced by this machine's directory."""
    if path is None or PLACEHOLDER not in str(path):
        return path
    return Path(str(path).replace(PLACEHOLDER, multiarch(machine)))
