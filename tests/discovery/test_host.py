"""Host reads that cannot block: special files, oversized files and the deadline of a pass."""

from __future__ import annotations

import os
import socket
import stat
import threading
from pathlib import Path

import pytest

from kubeacc.host.files import HostRoot, NotRegularFileError, read_regular
from kubeacc.model import DeviceType, Inventory
from tests.hosts import HostFactory, discover


def _attribute(root: Path, dtype: DeviceType, name: str) -> tuple[str, Path]:
    """(device name, machine path) of one sysfs attribute of the first device of a type."""
    dev = discover(root).by_type(dtype)[0]
    bdf = dev.pci_bus_id
    assert bdf
    return dev.name, Path(os.path.realpath(root / "sys/bus/pci/devices" / bdf)) / name


def discover_within(root: Path, seconds: float) -> Inventory:
    """discover() on a thread; fails (instead of hanging the test run) if it blocks."""
    out: list[Inventory] = []
    worker = threading.Thread(target=lambda: out.append(discover(root)), daemon=True)
    worker.start()
    worker.join(seconds)
    assert out, f"discovery still running after {seconds} s"
    return out[0]


def _replace(path: Path, kind: str) -> socket.socket | None:
    path.unlink()
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "chardev":
        os.mknod(path, 0o600 | stat.S_IFCHR, os.makedev(1, 5))  # like /dev/zero
    else:
        sock = socket.socket(socket.AF_UNIX)
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:  # through the directory's descriptor: sysfs paths are longer than sun_path
            sock.bind(f"/proc/self/fd/{parent}/{path.name}")
        finally:
            os.close(parent)
        return sock
    return None


@pytest.mark.parametrize(
    ("kind", "said"),
    [("fifo", "a FIFO"), ("socket", "a socket"), ("chardev", "a character device")],
)
def test_a_special_file_for_an_attribute_is_a_warning_not_a_hang(
    hosts: HostFactory, kind: str, said: str
) -> None:
    root = hosts.copy("dgx-h100")
    name, numa = _attribute(root, DeviceType.GPU, "numa_node")
    _, info = _attribute(root, DeviceType.NIC, "vendor")
    holders = [_replace(numa, kind), _replace(info, kind)]
    try:
        inv = discover_within(root, 20)
    finally:
        for sock in holders:
            if sock is not None:
                sock.close()
    gpu = next(d for d in inv.devices if d.name == name)
    assert gpu.numa_node == -1
    warning = next(w for w in inv.warnings if w.path.endswith("/numa_node"))
    assert warning.device == name
    refused = [w for w in inv.warnings if w.message == f"not a regular file ({said})"]
    assert warning in refused
    assert any(w.path.endswith("/vendor") for w in refused)
    assert len(inv.by_type(DeviceType.GPU)) == 8, "the other devices are all there"
    assert len(inv.by_type(DeviceType.NIC)) == 7, "the NIC without a vendor id is skipped"


def test_a_fifo_in_the_nvml_description_falls_back_to_sysfs(hosts: HostFactory) -> None:
    root = hosts.copy("dgx-h100")
    _replace(root / ".synthetic/nvml.json", "fifo")
    inv = discover_within(root, 20)
    assert {g.source for g in inv.by_type(DeviceType.GPU)} == {"nvidia-sysfs"}
    assert any("not a regular file (a FIFO)" in w.message for w in inv.warnings)


def test_read_regular_refuses_special_and_oversized_files(tmp_path: Path) -> None:
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    with pytest.raises(NotRegularFileError, match="a FIFO"):
        read_regular(str(fifo))
    big = tmp_path / "big"
    big.write_bytes(b"1" * 5000)
    assert read_regular(str(big), 5000) == b"1" * 5000
    with pytest.raises(OSError, match="larger than 4096 bytes"):
        read_regular(str(big), 4096)
    host = HostRoot(tmp_path)
    assert host.read_text("/big", limit=4096) is None
    assert [w.message for w in host.sink.items] == ["cannot read: larger than 4096 bytes"]


def test_a_pass_over_its_deadline_stops_reading_and_says_so(hosts: HostFactory) -> None:
    root = hosts.pristine("dgx-h100")
    inv = discover(root, deadline=0.0)
    assert inv.devices == []
    assert [w.path for w in inv.warnings] == ["discovery"]
    assert "longer than its 0 s deadline" in inv.warnings[0].message
    assert len(discover(root).devices) == 16, "the default deadline leaves a normal pass alone"
