from __future__ import annotations

import json
from pathlib import Path

from kubeacc.model import DeviceType, HealthState, PartitionKind
from tests.hosts import HostFactory, discover

NVML_JSON = ".synthetic/nvml.json"


def _edit_nvml(root: Path, edit) -> None:  # type: ignore[no-untyped-def]
    path = root / NVML_JSON
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def test_nvml_path_reports_every_gpu_with_nvml_facts_and_pci_topology(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"))
    gpus = inv.by_type(DeviceType.GPU)
    assert len(gpus) == 8
    assert [g.index for g in gpus] == list(range(8))
    for gpu in gpus:
        assert gpu.source == "nvml"
        assert gpu.vendor == "NVIDIA"
        assert "H100" in gpu.model
        assert gpu.uuid and gpu.uuid.startswith("GPU-")
        assert gpu.memory_bytes and gpu.memory_bytes > 79 * 2**30
        assert gpu.numa_node in (0, 1)
        assert gpu.pcie_root and gpu.pcie_root.startswith("pci0000:")
        assert len(gpu.pcie_path) >= 2, "behind a root port and a PCIe switch"
        assert gpu.pci and gpu.pci.driver == "nvidia"
        assert any(n.startswith("/dev/nvidia") and n[11:].isdigit() for n in gpu.device_nodes)
        assert "/dev/nvidiactl" in gpu.device_nodes
        assert gpu.health.state is HealthState.HEALTHY
        assert gpu.driver_version
        peers = {link.peer for link in gpu.links}
        assert len(peers) == 7, "every other GPU is reachable over NVLink"
    assert {g.numa_node for g in gpus} == {0, 1}
    assert len({g.pcie_root for g in gpus}) == 4


def test_sysfs_path_without_nvml_reads_proc(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"), nvml="off")
    gpus = inv.by_type(DeviceType.GPU)
    assert len(gpus) == 8
    for gpu in gpus:
        assert gpu.source == "nvidia-sysfs"
        assert gpu.uuid and gpu.uuid.startswith("GPU-")
        assert "H100" in gpu.model
        assert gpu.memory_bytes is None
        assert gpu.links == []
        assert gpu.driver_version
    nvml_uuids = {g.uuid for g in discover(hosts.pristine("dgx-h100")).by_type(DeviceType.GPU)}
    assert {g.uuid for g in gpus} == nvml_uuids, "both paths agree on identity"


def test_gpu_on_the_bus_but_missing_from_nvml_is_unhealthy(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    gone: list[str] = []

    def drop_first(data):  # type: ignore[no-untyped-def]
        gone.append(data["gpus"][0]["busId"][-12:].lower())
        del data["gpus"][0]

    _edit_nvml(root, drop_first)
    inv = discover(root)
    gpus = {g.pci_bus_id: g for g in inv.by_type(DeviceType.GPU)}
    assert len(gpus) == 8
    missing = gpus[gone[0]]
    assert missing.health.state is HealthState.UNHEALTHY
    assert "NVML" in missing.health.reason
    assert sum(g.health.healthy for g in gpus.values()) == 7


def test_row_remapping_failure_and_lost_gpu(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")

    def damage(data):  # type: ignore[no-untyped-def]
        data["gpus"][1]["remappedRows"] = {"pending": True}
        data["gpus"][2]["remappedRows"] = {"failure": True}
        data["gpus"][3]["lost"] = True

    _edit_nvml(root, damage)
    inv = discover(root)
    gpus = inv.by_type(DeviceType.GPU)
    reasons = sorted(g.health.reason for g in gpus if not g.health.healthy)
    assert len(reasons) == 3
    assert any("pending" in r for r in reasons)
    assert any("failed" in r for r in reasons)
    assert any("NVML" in r for r in reasons)
    assert any("GPU 3" in w.message for w in inv.warnings)


def test_mig_instances_are_partitions(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")

    def mig(data):  # type: ignore[no-untyped-def]
        data["gpus"][0]["migMode"] = 1
        data["gpus"][0]["migDevices"] = [
            {
                "index": i,
                "uuid": f"MIG-{i:08d}-0000-0000-0000-000000000000",
                "profile": "1g.10gb",
                "memoryTotal": 10 * 2**30,
            }
            for i in range(3)
        ]

    _edit_nvml(root, mig)
    gpu = discover(root).by_type(DeviceType.GPU)[0]
    migs = [p for p in gpu.partitions if p.kind is PartitionKind.MIG]
    assert [p.profile for p in migs] == ["1g.10gb"] * 3
    assert migs[0].uuid and migs[0].uuid.startswith("MIG-")
    assert gpu.attributes["migMode"] == "enabled"


def test_unreadable_nvml_description_falls_back_to_sysfs(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    (root / NVML_JSON).write_text("{not json")
    inv = discover(root)
    assert {g.source for g in inv.by_type(DeviceType.GPU)} == {"nvidia-sysfs"}
    assert any(w.path == "/" + NVML_JSON for w in inv.warnings)


def test_nvml_errors_on_one_gpu_leave_the_other_seven_with_nvml_data(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")

    def faults(data):  # type: ignore[no-untyped-def]
        data["gpus"][3]["errors"] = {"nvmlDeviceGetUUID": "GPU_IS_LOST"}  # partway through
        data["gpus"][5]["errors"] = {"nvmlDeviceGetMemoryInfo": "UNKNOWN"}  # one field
        data["gpus"][6]["errors"] = {"nvmlDeviceGetMigMode": "UNKNOWN"}  # a field of MIG
        data["gpus"][7]["errors"] = {"nvmlDeviceGetPciInfo": "UNKNOWN"}  # no address: sysfs

    _edit_nvml(root, faults)
    expected = discover(hosts.pristine("dgx-h100")).by_type(DeviceType.GPU)
    inv = discover(root)
    gpus = inv.by_type(DeviceType.GPU)
    assert [g.name for g in gpus] == [g.name for g in expected]
    lost, partial, no_mig, unaddressed = gpus[3], gpus[5], gpus[6], gpus[7]
    for i, (gpu, before) in enumerate(zip(gpus, expected, strict=True)):
        if i in (3, 7):
            continue
        assert gpu.source == "nvml", gpu.name
        assert gpu.health.healthy, (gpu.name, gpu.health)
        assert gpu.uuid == before.uuid and gpu.links == before.links
        if i != 5:
            assert gpu.memory_bytes == before.memory_bytes
    assert lost.source == "nvml" and lost.uuid is None
    assert lost.health.state is HealthState.UNHEALTHY
    assert lost.health.reason == "NVML: GPU is lost"
    assert partial.memory_bytes is None and partial.model == expected[5].model
    assert no_mig.partitions == []
    assert unaddressed.source == "nvidia-sysfs"
    assert unaddressed.health.state is HealthState.UNHEALTHY
    messages = {(w.device, w.path) for w in inv.warnings}
    assert (lost.name, "nvml:nvmlDeviceGetUUID") in messages
    assert (partial.name, "nvml:nvmlDeviceGetMemoryInfo") in messages
    assert (no_mig.name, "nvml:nvmlDeviceGetMigMode") in messages
    assert any(w.path == "nvml:7" for w in inv.warnings)


def test_an_error_injection_naming_no_nvml_call_is_an_unusable_description(
    hosts: HostFactory,
) -> None:
    root = hosts.copy("dgx-h100")
    _edit_nvml(root, lambda data: data["gpus"][0].update(errors={"nvmlNoSuchCall": "UNKNOWN"}))
    inv = discover(root)
    assert {g.source for g in inv.by_type(DeviceType.GPU)} == {"nvidia-sysfs"}
    assert any("nvmlNoSuchCall" in w.message for w in inv.warnings)


# /proc/driver/nvidia/gpus/<bdf>/information as a real H100 80GB HBM3 with driver 580.159.04
# wrote it (read on the GPU machine lent to issue 16's session; Bus Location is set per test).
REAL_H100_INFORMATION = (
    "Model: \t\t NVIDIA H100 80GB HBM3\n"
    "IRQ:   \t\t 41\n"
    "GPU UUID: \t GPU-20d63320-934b-2315-cfb4-8c165faaba76\n"
    "Video BIOS: \t 96.00.da.00.0c\n"
    "Bus Type: \t PCIe\n"
    "DMA Size: \t 52 bits\n"
    "DMA Mask: \t 0xfffffffffffff\n"
    "Bus Location: \t {bdf}\n"
    "Device Minor: \t {minor}\n"
    "GPU Firmware: \t 580.159.04\n"
    "GPU Excluded:\t No\n"
)


def test_the_information_file_as_a_real_driver_writes_it(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    first = discover(root, nvml="off").by_type(DeviceType.GPU)[0]
    assert first.pci
    minor = next(n for n in first.device_nodes if n[11:].isdigit())[11:]
    info = root / "proc/driver/nvidia/gpus" / first.pci.bus_id / "information"
    info.write_text(REAL_H100_INFORMATION.format(bdf=first.pci.bus_id, minor=minor))
    gpu = discover(root, nvml="off").by_type(DeviceType.GPU)[0]
    assert gpu.uuid == "GPU-20d63320-934b-2315-cfb4-8c165faaba76"
    assert gpu.model == "NVIDIA H100 80GB HBM3"
    assert f"/dev/nvidia{minor}" in gpu.device_nodes
    assert gpu.health.state is HealthState.HEALTHY
