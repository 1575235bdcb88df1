"""networkData read through the host seam (dra/netdata.py) from a synthetic host's sysfs and
``/proc/1/net`` files (written in the kernel's formats by kubeacc.synthetic.netaddrs)."""

from __future__ import annotations

from pathlib import Path

from kubeacc.agent.dra.netdata import host_reader, ipv4_addresses, network_data
from kubeacc.synthetic.host import SyntheticHost
from kubeacc.synthetic.tree import HostBuilder


def _host(tmp: Path) -> SyntheticHost:
    b = HostBuilder(tmp)
    root = b.root_complex(0, 0x00, numa=0)
    port = b.bridge(root, "0000:00:01.0", 0x8086, 0x352A)
    b.function(port, "0000:01:00.0", 0x15B3, 0x1021, 0x020000, "mlx5_core")
    b.function(port, "0000:01:00.1", 0x15B3, 0x1021, 0x020000, "mlx5_core")
    b.function(port, "0000:01:00.2", 0x15B3, 0x1021, 0x020000, "mlx5_core")
    ips = ("10.1.2.3/24", "192.168.7.9/16", "fd00:1::5/64", "fe80::1/64")
    b.netdev("0000:01:00.0", "ens1f0", address="0c:42:a1:00:00:01", ips=ips)
    b.netdev("0000:01:00.1", "ens1f1", address="0c:42:a1:00:00:02", ips=("10.9.0.1/24",))
    b.netdev("0000:01:00.2", "ens1f2", address="0c:42:a1:00:00:03", ips=("10.9.0.2/24",))
    return SyntheticHost(tmp)


def test_whole_nic_gets_address_and_ips_of_its_interface_only(tmp_path: Path) -> None:
    host = _host(tmp_path)
    data = network_data(host.files(), "ens1f0", with_ips=True)
    assert data == {
        "interfaceName": "ens1f0",
        "hardwareAddress": "0c:42:a1:00:00:01",
        "ips": ["10.1.2.3/24", "192.168.7.9/16", "fd00:1::5/64"],  # no link-local
    }


def test_virtual_function_gets_no_ips(tmp_path: Path) -> None:
    read = host_reader(_host(tmp_path))
    assert read("ens1f0", False) == {
        "interfaceName": "ens1f0",
        "hardwareAddress": "0c:42:a1:00:00:01",
    }


def test_subnet_on_two_interfaces_is_given_to_neither(tmp_path: Path) -> None:
    files = _host(tmp_path).files()
    assert ipv4_addresses(files, "ens1f1") == []
    assert ipv4_addresses(files, "ens1f2") == []


def test_interface_without_files_has_its_name_only(tmp_path: Path) -> None:
    host = SyntheticHost(HostBuilder(tmp_path).root)
    assert network_data(host.files(), "ens9", with_ips=True) == {"interfaceName": "ens9"}
