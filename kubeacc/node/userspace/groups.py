"""The host group a device node is restricted to, handed to the container with the node.

AMD's ROCm and Intel's GPU user space open ``/dev/kfd`` and ``/dev/dri/renderD<N>``, which
distributions restrict to a group (``render``, ``video``: mode ``0660``). A container that runs
as a user other than root can open them only as a member of that group, and the group id is the
host's (it differs between distributions and nodes), so an image cannot know it. For each
device node whose host file is group-restricted (not readable and writable by others, a group
other than root's), the CDI spec keeps the node's group in the container (the device node's
``gid``) and adds the group to the container's processes (``additionalGids``, CDI 0.7.0). A node
open to everyone (NVIDIA's ``/dev/nvidia*``, ``0666``) gets neither, and its spec stays at the
CDI version it had.

The node is read at ``<device root>/<path>``, where the container runtime opens it.
"""

from __future__ import annotations

import os
from pathlib import Path

#: The CDI version that introduced ``additionalGids``.
GROUPS_CDI_VERSION = "0.7.0"
_OTHER_RW = 0o006


def node_group(path: str, device_root: Path) -> int | None:
    """The group the host's device node ``path`` is restricted to; None when it is open to
    everyone, owned by group root, or not there (the runtime reports a missing node itself)."""
    try:
        st = os.stat(device_root / path.lstrip("/"))
    except OSError:
        return None
    if st.st_gid == 0 or st.st_mode & _OTHER_RW == _OTHER_RW:
        return None
    return st.st_gid


def cdi_version(base: str, gids: set[int]) -> str:
    """The spec's version: ``base``, or the one ``additionalGids`` needs when there are any."""
    if not gids:
        return base
    as_tuple = tuple(int(p) for p in base.split("."))
    need = tuple(int(p) for p in GROUPS_CDI_VERSION.split("."))
    return base if as_tuple >= need else GROUPS_CDI_VERSION
