"""``kubeacc plan --add-node PROFILE[:NAME]``: would a node of this shape let the claims fit?

The node is one of the synthetic host profiles (``kubeacc.synthetic.profiles``), built in a
temporary folder, discovered as the agent discovers a node, and published as the agent would
publish it by default (its ResourceSlices, every device whole; a Node when the plan has Nodes).
The planner then sees it beside the real ones, so its verdict is kube-scheduler's once such a
node joins. Two things the default publication leaves out are said, not guessed: GPUs in MIG
mode (their partitions depend on the node's MIG configuration) and memory sharing (it needs
``--memory-shared`` or a policy on the real node).
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

#: Name of an added node when the spec gives none: ``what-if-<profile>[-<n>]``.
PREFIX = "what-if"


class WhatIfError(ValueError):
    """A ``--add-node`` spec that names no known profile, or a node name already taken."""


def _split(spec: str, taken: set[str]) -> tuple[str, str]:
    from kubeacc.synthetic.profiles import NAMES

    profile, _, name = spec.partition(":")
    if profile not in NAMES:
        raise WhatIfError(
            f"--add-node {spec}: unknown profile {profile!r}; known: {', '.join(NAMES)}"
        )
    if not name:
        name = f"{PREFIX}-{profile}"
        n = 1
        while name in taken:
            n += 1
            name = f"{PREFIX}-{profile}-{n}"
    elif name in taken:
        raise WhatIfError(f"--add-node {spec}: node {name!r} exists already")
    return profile, name


def node_objects(
    spec: str, taken: set[str], with_node: bool
) -> tuple[str, list[dict[str, Any]], list[str], int]:
    """(node name, its objects, notes, devices published) for one ``--add-node`` spec;
    ``taken``: node names in use."""
    from kubeacc.agent.dra.devices import slice_devices
    from kubeacc.agent.dra.publishing import Publishing
    from kubeacc.agent.dra.slices import build_slices
    from kubeacc.discovery import discover
    from kubeacc.synthetic import profiles
    from kubeacc.synthetic.host import SyntheticHost

    profile, name = _split(spec, taken)
    with tempfile.TemporaryDirectory(prefix="kubeacc-what-if-") as tmp:
        root = profiles.build(profile, Path(tmp) / profile)
        inv = discover(SyntheticHost(root))
    mig = [d.name for d in inv.devices if d.attributes.get("migMode") == "enabled"]
    kept = inv.replace(devices=[d for d in inv.devices if d.name not in mig])
    # as an agent with the default --dra-publish publishes it (no SR-IOV VFs)
    devices = slice_devices(kept, vfs=Publishing().vfs)
    objs: list[dict[str, Any]] = build_slices(name, None, devices, generation=1)
    if with_node:
        objs.append(
            {
                "apiVersion": "v1",
                "kind": "Node",
                "metadata": {"name": name, "labels": {"kubernetes.io/hostname": name}},
            }
        )
    notes = [f"{name}: a node like profile {profile} ({len(devices)} devices, published whole)"]
    if mig:
        notes.append(
            f"{name}: {len(mig)} GPU(s) in MIG mode left out ({', '.join(mig)}): their partitions "
            "depend on the node's MIG configuration"
        )
    return name, objs, notes, len(devices)


def add_nodes(objs: list[dict[str, Any]], specs: list[str]) -> list[str]:
    """Append the what-if nodes of ``specs`` to ``objs``; the notes to print. Raises
    :class:`WhatIfError` before changing ``objs`` when a spec is bad."""
    taken = {
        str((o.get("metadata") or {}).get("name")) for o in objs if o.get("kind") == "Node"
    } | {
        str((o.get("spec") or {}).get("nodeName")) for o in objs if o.get("kind") == "ResourceSlice"
    }
    with_node = any(o.get("kind") == "Node" for o in objs)
    added: list[dict[str, Any]] = []
    notes: list[str] = []
    for spec in specs:
        name, more, lines, _ = node_objects(spec, taken, with_node)
        taken.add(name)
        added += more
        notes += lines
    objs += added
    return notes
