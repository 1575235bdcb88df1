"""The MigMode operation on a synthetic host: NVML's pending mode, the GPU reset, refusals."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import pynvml
import pytest

from kubeacc.agent.users import accelerator_device
from kubeacc.crds.apiread import operation_spec
from kubeacc.crds.views import OperationSpecView
from kubeacc.model import Device
from kubeacc.node.operations.bitstreams import BitstreamLibrary
from kubeacc.node.operations.executor import Executor
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.kernel import SyntheticKernel
from kubeacc.synthetic.mig_state import read_calls
from kubeacc.synthetic.nvmllib import SyntheticNVML
from kubeacc.synthetic.profiles import build
from tests.hosts import discover

H100, A100 = "gpu-0000-01-00-0", "gpu-0000-02-00-0"


@pytest.fixture
def host(tmp_path: Path) -> tuple[Path, Executor]:
    root = build("mig-pair", tmp_path / "root")
    kernel = SyntheticKernel(root)

    def rediscover(name: str) -> Device | None:
        return {d.name: d for d in discover(root).devices}.get(name)

    return root, Executor(
        SyntheticHost(root, kernel=kernel), BitstreamLibrary(tmp_path), rediscover
    )


def spec(enabled: bool) -> OperationSpecView:
    return _spec({"action": "MigMode", "targets": ["x"], "migMode": {"enabled": enabled}})


def device(root: Path, name: str) -> Device:
    return {d.name: d for d in discover(root).devices}[name]


def mode(root: Path, index: int) -> list[int]:
    lib = SyntheticNVML.from_file(str(root / ".synthetic/nvml.json"))
    return list(lib.nvmlDeviceGetMigMode(lib.nvmlDeviceGetHandleByIndex(index)))


def run(ex: Executor, dev: Device, enabled: bool):  # type: ignore[no-untyped-def]
    return ex.run(spec(enabled), dev, host_driver="nvidia", allowed_digests=set())


def test_mig_off_and_on_again_with_a_reset(host: tuple[Path, Executor]) -> None:
    root, ex = host
    out = run(ex, device(root, A100), False)
    assert (out.ok, out.reason) == (True, "MigModeSet"), out.message
    assert mode(root, 1) == [0, 0]
    assert device(root, A100).attributes.get("migMode") != "enabled"  # discovery follows
    assert run(ex, device(root, A100), False).reason == "MigModeUnchanged"
    out = run(ex, device(root, A100), True)
    assert out.ok and mode(root, 1) == [1, 1]
    calls = [(c["call"], c.get("mode")) for c in read_calls(root / ".synthetic")]
    assert calls == [
        ("nvmlDeviceSetMigMode", 0),
        ("reset", None),
        ("nvmlDeviceSetMigMode", 1),
        ("reset", None),
    ]


def test_refused_while_instances_exist_and_for_other_devices(host: tuple[Path, Executor]) -> None:
    root, ex = host
    lib = SyntheticNVML.from_file(str(root / ".synthetic/nvml.json"))
    h = lib.nvmlDeviceGetHandleByIndex(0)
    lib.nvmlDeviceCreateGpuInstanceWithPlacement(h, 9, pynvml.c_nvmlGpuInstancePlacement_t(0, 4))
    out = run(ex, device(root, H100), False)
    assert (out.ok, out.reason) == (False, "MigInstancesExist")
    assert mode(root, 0) == [1, 1]  # nothing pending
    other = device(root, A100).replace(vendor="AMD")
    assert run(ex, other, False).reason == "NotAnNvidiaGPU"


def test_a_partition_claim_is_a_use_of_its_gpu() -> None:
    known = [H100, "nic-0000-05-00-0"]
    assert accelerator_device(f"{H100}-mig-3g-40gb-4", known) == H100
    assert accelerator_device(f"{H100}-mig-gi2", known) == H100
    assert accelerator_device("nic-0000-05-00-0-vf3", known) == "nic-0000-05-00-0"
    assert accelerator_device("other-mig-1g-10gb-0", known) == "other-mig-1g-10gb-0"


def _spec(spec: Mapping[str, object]) -> OperationSpecView:
    """The spec as the agent reads it (kubeacc.crds.apiread)."""
    return operation_spec({"spec": spec})
