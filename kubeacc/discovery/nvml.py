"""The ``--nvml`` choice shared by every command that discovers (see docs/discovery.md)."""

from __future__ import annotations

import logging
from enum import StrEnum
from pathlib import Path

log = logging.getLogger(__name__)


class NvmlMode(StrEnum):
    #: NVML when it answers, the sysfs path otherwise.
    AUTO = "auto"
    #: Like auto, but a warning when NVML cannot be used.
    ON = "on"
    #: Never NVML: sysfs and /proc/driver/nvidia only.
    OFF = "off"


def use_nvml_library(path: Path) -> bool:
    """Load NVML from ``path`` rather than from the dynamic linker's search path.

    A node agent in a container finds the host driver's ``libnvidia-ml.so.1`` where the chart
    mounts the host's library directory; putting that directory on ``LD_LIBRARY_PATH`` would
    make every other library of the process come from the host too. A node without the file
    (no NVIDIA driver) keeps the default, which then finds no NVML: False.
    """
    import ctypes

    import pynvml

    if not path.is_file():
        log.info("no NVML library at %s", path)
        return False
    try:
        pynvml.nvmlLib = ctypes.CDLL(str(path))
    except OSError as err:
        log.warning("NVML library %s cannot be loaded: %s", path, err)
        return False
    return True
