"""The synthetic NVML's state-changing calls: compute mode.

:class:`ControlledNVML` answers everything :class:`~kubeacc.synthetic.nvmllib.SyntheticNVML`
does, plus ``nvmlDeviceGetHandleByPciBusId``, ``nvmlDeviceGetComputeMode`` and
``nvmlDeviceSetComputeMode`` with pynvml's names, arguments and errors. The compute mode lives
in the host's GPU state (``/.synthetic/gpu-state.json``, so an agent restart sees what the
previous one set, as it would on a real driver), starting from the description's
``computeMode`` (default 0, ``NVML_COMPUTEMODE_DEFAULT``). A GPU's ``computeModes`` lists the
modes it accepts (default: all but the deprecated exclusive-thread mode); setting another
answers ``NOT_SUPPORTED``. Every set call, refused or not, is appended to the call record
(:mod:`kubeacc.synthetic.tools.hoststate`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pynvml

from kubeacc.host.files import read_regular
from kubeacc.synthetic.nvmllib import DESCRIPTION_LIMIT, SyntheticNVML, _err, _Handle, injectable
from kubeacc.synthetic.tools import hoststate

#: What a GPU accepts unless its description says otherwise.
DEFAULT_MODES = (
    pynvml.NVML_COMPUTEMODE_DEFAULT,
    pynvml.NVML_COMPUTEMODE_PROHIBITED,
    pynvml.NVML_COMPUTEMODE_EXCLUSIVE_PROCESS,
)


def _bdf(bus_id: str | bytes) -> str:
    text = bus_id.decode() if isinstance(bus_id, bytes) else bus_id
    text = text.lower()
    return text[4:] if len(text) == 16 else text  # 00000000:1b:00.0 -> 0000:1b:00.0


class ControlledNVML(SyntheticNVML):
    """A synthetic NVML whose GPUs' compute mode can be read and set (module docstring)."""

    def __init__(self, description: dict[str, Any], root: Path | None = None):
        # MIG state (kubeacc.synthetic.mig_state) lives beside the description, in /.synthetic.
        super().__init__(description, root / ".synthetic" if root is not None else None)
        #: The host root; None: state kept in memory only (a description without a host).
        self.root = root
        self._memory: dict[str, Any] = {}

    @classmethod
    def from_file(cls, path: str) -> ControlledNVML:
        import json

        data = json.loads(read_regular(path, DESCRIPTION_LIMIT))
        if not isinstance(data, dict):
            raise ValueError("NVML description must be a JSON object")
        return cls(data, Path(path).parent.parent)

    def nvmlDeviceGetHandleByPciBusId(self, bus_id: str | bytes) -> _Handle:
        want = _bdf(bus_id)
        for n, gpu in enumerate(self.gpus):
            if _bdf(str(gpu["busId"])) == want:
                return self.nvmlDeviceGetHandleByIndex(n)
        raise _err(pynvml.NVML_ERROR_NOT_FOUND)

    def _state(self) -> dict[str, Any]:
        return hoststate.read_state(self.root) if self.root is not None else self._memory

    @injectable
    def nvmlDeviceGetComputeMode(self, handle: _Handle) -> int:
        gpu = self._gpu(handle)
        entry = self._state().get("gpus", {}).get(str(gpu["uuid"]), {})
        return int(entry.get("computeMode", gpu.get("computeMode", 0)))

    @injectable
    def nvmlDeviceSetComputeMode(self, handle: _Handle, mode: int) -> None:
        gpu = self._gpu(handle)
        uuid = str(gpu["uuid"])
        accepted = [int(m) for m in gpu.get("computeModes", DEFAULT_MODES)]
        if mode not in accepted:
            self._record(uuid, mode, "NOT_SUPPORTED")
            raise _err(pynvml.NVML_ERROR_NOT_SUPPORTED)
        if self.root is None:
            hoststate.gpu_state(self._memory, uuid)["computeMode"] = mode
        else:
            with hoststate.locked_state(self.root) as state:
                hoststate.gpu_state(state, uuid)["computeMode"] = mode
        self._record(uuid, mode, "ok")

    def _record(self, uuid: str, mode: int, result: str) -> None:
        if self.root is not None:
            hoststate.record(self.root, "nvml", "nvmlDeviceSetComputeMode", uuid, [mode], result)
