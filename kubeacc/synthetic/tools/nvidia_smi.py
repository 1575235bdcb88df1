"""Synthetic ``nvidia-smi``: the one sub-command the agent uses, ``compute-policy``.

``nvidia-smi compute-policy -l [-i <GPU>]`` lists each GPU's time slice as the real tool does.
``nvidia-smi compute-policy -i <GPU> --set-timeslice=<0-3>`` sets the time slice of the GPU's
time-sliced scheduling (0 default, 1 short, 2 medium, 3 long). ``<GPU>`` is an index, a UUID
or a PCI bus id, as for the real tool. A GPU whose NVML description says ``"timeslice": false``
answers as a GPU without the feature does (exit status 3, "not supported"). The new value goes
into the host's GPU state, the call into the call record (:mod:`.hoststate`).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from kubeacc.synthetic.tools import hoststate

#: nvidia-smi's exit status for "the requested operation is not available on target device".
NOT_SUPPORTED = 3
INVALID_ARGUMENT = 2


def _find(gpus: list[dict[str, Any]], ident: str) -> dict[str, Any] | None:
    for n, gpu in enumerate(gpus):
        bus = str(gpu["busId"]).lower()
        if ident in (str(n), gpu["uuid"]) or ident.lower() in (bus, bus[4:]):
            return gpu
    return None


def _option(args: list[str], name: str) -> str | None:
    for n, arg in enumerate(args):
        if arg == name and n + 1 < len(args):
            return args[n + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


#: ``--set-timeslice`` values as ``-l`` names them.
NAMES = ("Default", "Short", "Medium", "Long")


def _list(root: Path, ident: str | None) -> int:
    """``compute-policy -l``: the table the real tool prints (driver 580)."""
    gpus = hoststate.gpus(root)
    chosen = [g for g in gpus if ident is None or g is _find(gpus, ident)]
    if not chosen:
        print(f"No devices were found matching {ident}", file=sys.stderr)
        return 6
    state = hoststate.read_state(root).get("gpus", {})
    print("+-------------------------------------+")
    print("| GPU compute policies:               |")
    print("| GPU     Name           Value        |")
    print("|=====================================|")
    for gpu in chosen:
        n = gpus.index(gpu)
        if gpu.get("timeslice", True) is False:
            value = "N/A"
        else:
            value = NAMES[int(state.get(gpu["uuid"], {}).get("timeslice", 0))]
        print(f"| {n:3d}   Timeslice       {value:<14}|")
    print("+-------------------------------------+")
    return 0


def main(argv: list[str]) -> int:
    root = hoststate.root_of_tool(argv[0])
    args = argv[1:]
    if not args or args[0] != "compute-policy":
        print("synthetic nvidia-smi: only 'compute-policy' is implemented", file=sys.stderr)
        return INVALID_ARGUMENT
    ident = _option(args, "-i") or _option(args, "--id")
    if "-l" in args or "--list" in args:
        return _list(root, ident)
    value = _option(args, "--set-timeslice")
    if ident is None or value is None or value not in ("0", "1", "2", "3"):
        print("Usage: nvidia-smi compute-policy -i <GPU> --set-timeslice=<0-3>", file=sys.stderr)
        return INVALID_ARGUMENT
    gpu = _find(hoststate.gpus(root), ident)
    if gpu is None:
        print(f"No devices were found matching {ident}", file=sys.stderr)
        return 6
    uuid = str(gpu["uuid"])
    if gpu.get("timeslice", True) is False:
        hoststate.record(root, "nvidia-smi", "set-timeslice", uuid, [int(value)], "NOT_SUPPORTED")
        print(f"Setting the time slice is not supported for GPU {gpu['busId']}.", file=sys.stderr)
        return NOT_SUPPORTED
    with hoststate.locked_state(root) as state:
        hoststate.gpu_state(state, uuid)["timeslice"] = int(value)
    hoststate.record(root, "nvidia-smi", "set-timeslice", uuid, [int(value)], "ok")
    print(f"Set timeslice to {value} for GPU {gpu['busId']}.")
    return 0
