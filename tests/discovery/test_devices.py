"""One test module per family would repeat the same set-up; each test names its backend."""

from __future__ import annotations

from kubeacc.model import DeviceType, FPGADriver, HealthState, PartitionKind
from tests.hosts import HostFactory, discover


def test_nics_with_rdma_and_sriov_and_onboard_nic_left_out(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"))
    nics = inv.by_type(DeviceType.NIC)
    assert len(nics) == 8
    vfs = 0
    for nic in nics:
        assert nic.vendor == "Mellanox"
        assert nic.rdma_devices and nic.rdma_devices[0].startswith("mlx5_")
        assert nic.netdevs
        assert nic.sriov is not None and nic.sriov.total_vfs == 16 and nic.sriov.num_vfs == 8
        assert len(nic.virtual_functions) == 8
        assert all(p.kind is PartitionKind.SRIOV_VF and p.bus_id for p in nic.partitions)
        assert nic.health.healthy
        vfs += len(nic.partitions)
    assert vfs == 64
    reported = {d.pci_bus_id for d in inv.devices}
    assert not any(vf in reported for nic in nics for vf in nic.virtual_functions)
    vendors = {d.pci.vendor_id for d in inv.devices if d.pci}
    assert "0x1a03" not in vendors, "the BMC's VGA controller is not an accelerator"
    assert "0x144d" not in vendors, "NVMe drives are not reported"
    assert "0x14e4" not in vendors, "onboard NIC without SR-IOV/RDMA is not reported"
    assert {d.type for d in inv.devices} == {DeviceType.GPU, DeviceType.NIC}


def test_gpus_and_nics_share_switches(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"))
    roots = {}
    for dev in inv.devices:
        roots.setdefault(dev.pcie_root, set()).add(dev.type)
    assert len(roots) == 4
    assert all(types == {DeviceType.GPU, DeviceType.NIC} for types in roots.values())


def test_intel_fpga_dfl(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("intel-fpga-dfl"))
    fpgas = inv.by_type(DeviceType.FPGA)
    assert len(fpgas) == 2
    for fpga in fpgas:
        assert fpga.source == "fpga-dfl"
        assert fpga.vendor == "Intel"
        assert fpga.fpga and fpga.fpga.driver is FPGADriver.DFL
        assert fpga.fpga.interface_id and len(fpga.fpga.interface_id) == 32
        assert any(n.startswith("/dev/dfl-port.") for n in fpga.device_nodes)
        assert any(n.startswith("/dev/dfl-fme.") for n in fpga.device_nodes)
        assert fpga.fpga.ports
    assert sum(1 for f in fpgas if f.fpga and f.fpga.afu_id) == 1
    assert {f.numa_node for f in fpgas} == {0, 1}


def test_intel_fpga_opae(hosts: HostFactory) -> None:
    fpgas = discover(hosts.pristine("intel-fpga-opae")).by_type(DeviceType.FPGA)
    assert len(fpgas) == 2
    for fpga in fpgas:
        assert fpga.source == "fpga-opae"
        assert fpga.fpga and fpga.fpga.driver is FPGADriver.OPAE
        assert fpga.fpga.interface_id
        assert any(n.startswith("/dev/intel-fpga-port.") for n in fpga.device_nodes)
    assert sum(1 for f in fpgas if f.fpga and f.fpga.afu_id) >= 1


def test_aws_fpgas_by_function_not_by_vendor(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("aws-f1"))
    fpgas = inv.by_type(DeviceType.FPGA)
    assert fpgas
    assert all(f.pci and f.pci.device_id == "0xf000" for f in fpgas)
    assert all(f.fpga and f.fpga.driver is FPGADriver.AWS for f in fpgas)
    assert all("managementFunction" in f.attributes for f in fpgas)
    assert inv.by_type(DeviceType.NIC) == [], "ENA has no SR-IOV or RDMA here"
    assert len(inv.devices) == len(fpgas)
    assert all(f.numa_node in (-1, 0) for f in fpgas)


def test_kunlun_xpus(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("kunlun-xpu"))
    xpus = inv.by_type(DeviceType.XPU)
    assert len(xpus) == 8
    assert [x.device_nodes[0] for x in xpus] == [f"/dev/xpu{i}" for i in range(8)]
    assert all(x.vendor == "Baidu" and x.health.healthy for x in xpus)
    assert {x.numa_node for x in xpus} == {0, 1}
    assert len(inv.by_type(DeviceType.NIC)) == 1


def test_amd_and_intel_gpus_from_drm(hosts: HostFactory) -> None:
    gpus = discover(hosts.pristine("amd-gpu")).by_type(DeviceType.GPU)
    amd = [g for g in gpus if g.vendor == "AMD"]
    assert len(amd) == 4
    for gpu in amd:
        assert gpu.source == "drm"
        assert "/dev/kfd" in gpu.device_nodes
        assert any(n.startswith("/dev/dri/renderD") for n in gpu.device_nodes)
        assert any(n.startswith("/dev/dri/card") for n in gpu.device_nodes)
    assert len({n for g in amd for n in g.device_nodes if "renderD" in n}) == 4


def test_edge_node_mixed(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("edge-mixed"))
    types = sorted(d.type.value for d in inv.devices)
    assert types == ["accelerator", "fpga", "gpu", "nic"]
    nic = inv.by_type(DeviceType.NIC)[0]
    assert nic.sriov and nic.sriov.num_vfs == 4 and len(nic.virtual_functions) == 4
    assert all(p.driver == "iavf" for p in nic.partitions)
    fpga = inv.by_type(DeviceType.FPGA)[0]
    assert fpga.fpga and fpga.fpga.driver is FPGADriver.XILINX
    assert "managementFunction" in fpga.attributes
    acc = inv.by_type(DeviceType.ACCELERATOR)[0]
    assert acc.source == "pci-class"
    assert acc.health.state is HealthState.HEALTHY or acc.health.reason
    assert inv.numa_nodes and len(inv.numa_nodes) == 1


def test_type_filter(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"), types=[DeviceType.NIC])
    assert {d.type for d in inv.devices} == {DeviceType.NIC}


def test_numa_distances(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"))
    assert [n.id for n in inv.numa_nodes] == [0, 1]
    assert inv.numa_nodes[0].distances == [10, 21]
    assert inv.numa_nodes[1].distances == [21, 10]
    assert inv.numa_nodes[0].cpus


def test_names_come_from_the_hosts_pci_ids(hosts: HostFactory) -> None:
    inv = discover(hosts.pristine("dgx-h100"))
    nic = inv.by_type(DeviceType.NIC)[0]
    assert "ConnectX" in nic.model
    root = hosts.copy("dgx-h100")
    (root / "usr/share/misc/pci.ids").unlink()
    inv2 = discover(root, nvml="off")
    nic2 = inv2.by_type(DeviceType.NIC)[0]
    assert nic2.pci is not None
    assert nic2.model == nic2.pci.device_id or "ConnectX" in nic2.model
