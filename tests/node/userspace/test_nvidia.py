"""Finding the NVIDIA driver's user space under a driver root, through the host seam."""

from __future__ import annotations

import os
import shutil
import socket
import stat
import subprocess
from pathlib import Path

import pytest

from kubeacc.host.files import HostRoot
from kubeacc.node.userspace.edits import container_edits, hook_args
from kubeacc.node.userspace.nvidia import DriverRootError, find, module_version
from kubeacc.node.userspace.provider import DriverUserSpace, UserSpaceMode
from kubeacc.synthetic.host import SyntheticHost
from tests.driverroot import driver_version, stand_in_driver
from tests.hosts import HostFactory


@pytest.fixture
def host(hosts: HostFactory) -> Path:
    return hosts.copy("dgx-h100")


def test_the_libraries_of_the_modules_version_with_their_links(host: Path) -> None:
    version = driver_version(host)
    stand_in_driver(host / "driver", version)
    us = find(HostRoot(host), HostRoot(host / "driver"), "/driver")
    d = "/usr/lib/x86_64-linux-gnu"
    assert us.version == version
    assert us.library_dir == d
    assert us.libraries == tuple(
        f"{d}/{n}.so.{version}" for n in ("libcuda", "libnvidia-ml", "libnvidia-ptxjitcompiler")
    )
    assert dict(us.links) == {
        f"{d}/libcuda.so": f"libcuda.so.{version}",
        f"{d}/libcuda.so.1": f"libcuda.so.{version}",
        f"{d}/libnvidia-ml.so.1": f"libnvidia-ml.so.{version}",
    }
    assert us.utilities == ("/usr/bin/nvidia-smi",)
    assert us.firmware == f"/lib/firmware/nvidia/{version}"
    assert set(us.absent) == {"nvidia-debugdump", "nvidia-persistenced"}


def test_an_arm64_node_and_a_driver_without_firmware(host: Path) -> None:
    version = driver_version(host)
    root = stand_in_driver(host / "driver", version, "usr/lib/aarch64-linux-gnu")
    shutil.rmtree(root / "lib/firmware")
    us = find(HostRoot(host), HostRoot(root), "/driver")
    assert us.library_dir == "/usr/lib/aarch64-linux-gnu"
    assert us.firmware is None and f"/lib/firmware/nvidia/{version}" in us.absent


def test_libraries_of_another_version_are_refused_by_name(host: Path) -> None:
    stand_in_driver(host / "driver", "535.104.05")
    with pytest.raises(DriverRootError) as err:
        find(HostRoot(host), HostRoot(host / "driver"), "/driver")
    v = driver_version(host)
    assert f"driver root /driver: no libcuda.so.{v} or libnvidia-ml.so.{v} (driver {v})" in str(
        err.value
    )


def test_nvml_missing_is_named(host: Path) -> None:
    version = driver_version(host)
    root = stand_in_driver(host / "driver", version)
    (root / f"usr/lib/x86_64-linux-gnu/libnvidia-ml.so.{version}").unlink()
    with pytest.raises(DriverRootError, match=rf"no libnvidia-ml\.so\.{version} "):
        find(HostRoot(host), HostRoot(root), "/driver")


def test_a_missing_driver_root_and_a_missing_module(host: Path, tmp_path: Path) -> None:
    with pytest.raises(DriverRootError, match=r"driver root /nowhere .* is not a directory"):
        find(HostRoot(host), HostRoot(host / "nowhere"), "/nowhere")
    (host / "proc/driver/nvidia/version").unlink()
    assert module_version(HostRoot(host)) == driver_version(host)  # sysfs still says
    (host / "sys/module/nvidia/version").unlink()
    with pytest.raises(DriverRootError, match="is the driver loaded"):
        module_version(HostRoot(host))


def test_the_cdi_edits_mount_read_only_and_run_the_hook(host: Path) -> None:
    version = driver_version(host)
    stand_in_driver(host / "driver", version)
    hook = Path("/var/lib/kubeacc/native/kubeacc-cdi-hook")
    us = DriverUserSpace(SyntheticHost(host), "/driver", hook, Path("/run/nvidia/driver"))
    edits = us.nvidia_edits()
    lib = f"/usr/lib/x86_64-linux-gnu/libcuda.so.{version}"
    assert {
        "hostPath": f"/run/nvidia/driver{lib}",
        "containerPath": lib,
        "options": ["ro", "nosuid", "nodev", "bind"],
    } in edits["mounts"]
    (h,) = edits["hooks"]
    assert h["hookName"] == "createContainer" and h["path"] == str(hook)
    assert h["args"] == hook_args(us.find())
    assert h["args"][:4] == [
        "kubeacc-cdi-hook",
        "update-ldcache",
        "--folder",
        "/usr/lib/x86_64-linux-gnu",
    ]
    assert f"libcuda.so.{version}::/usr/lib/x86_64-linux-gnu/libcuda.so.1" in h["args"]
    assert container_edits(us.find(), us.where, hook) == edits
    assert DriverUserSpace(SyntheticHost(host), mode=UserSpaceMode.TOOLKIT).nvidia_edits() == {}


def _socket_at(path: Path) -> socket.socket:
    """A listening unix socket at ``path`` (bound under a short name: sun_path is 108 bytes)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    short = Path(f"/tmp/kubeacc-sock-{os.getpid()}")
    short.unlink(missing_ok=True)
    srv.bind(str(short))
    srv.listen(1)
    os.rename(short, path)
    return srv


def test_every_user_space_mount_is_read_only(host: Path) -> None:
    """Issue 43, a container's root against the host's files: no mount of the driver's user
    space, the persistenced and fabric manager sockets included, is writable."""
    root = stand_in_driver(host / "driver", driver_version(host))
    srv = _socket_at(root / "run/nvidia-persistenced/socket")
    try:
        us = DriverUserSpace(SyntheticHost(host), "/driver", Path("/hook"))
        mounts = us.nvidia_edits()["mounts"]
    finally:
        srv.close()
    assert any(m["containerPath"] == "/run/nvidia-persistenced/socket" for m in mounts)
    for m in mounts:
        assert {"ro", "nosuid", "nodev", "bind"} <= set(m["options"]), m
        assert "rw" not in m["options"], m


#: What the container's root tries on the mounted socket (its path relative: sun_path is short).
CONTAINER_PROGRAM = """
import os, socket
try:
    os.chmod("container-socket", 0o666)
    print("chmod changed the host file")
except OSError as e:
    print("chmod refused:", e.strerror)
c = socket.socket(socket.AF_UNIX)
c.connect("container-socket")
print("connected")
"""


@pytest.mark.skipif(
    os.geteuid() != 0 or shutil.which("unshare") is None, reason="needs root and unshare"
)
def test_a_container_cannot_change_the_hosts_socket_through_its_mount(
    host: Path, tmp_path: Path
) -> None:
    """The socket mounted with the spec's own options, in a private mount namespace as the
    runtime would: the container's root cannot chmod the host's socket (it could through a
    mount without ``ro``: the host's file is the same inode) and still connects to it."""
    root = stand_in_driver(host / "driver", driver_version(host))
    sock = root / "run/nvidia-persistenced/socket"
    srv = _socket_at(sock)
    try:
        sock.chmod(0o600)
        us = DriverUserSpace(SyntheticHost(host), "/driver", Path("/hook"))
        (m,) = [m for m in us.nvidia_edits()["mounts"] if m["hostPath"] == str(sock)]
        seen = tmp_path / "container-socket"
        seen.touch()
        opts = ",".join(o for o in m["options"] if o != "bind")
        (tmp_path / "container.py").write_text(CONTAINER_PROGRAM)
        script = (
            f"mount --bind {sock} {seen} && mount -o remount,bind,{opts} {seen} && "
            f"cd {tmp_path} && python3 container.py"
        )
        done = subprocess.run(
            ["unshare", "--mount", "--propagation", "private", "sh", "-c", script],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        mode = stat.S_IMODE(sock.stat().st_mode)
    finally:
        srv.close()
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["chmod refused: Read-only file system", "connected"]
    assert mode == 0o600


def test_without_the_hook_nothing_half_is_handed_out(host: Path) -> None:
    stand_in_driver(host / "driver", driver_version(host))
    with pytest.raises(DriverRootError, match="kubeacc-cdi-hook"):
        DriverUserSpace(SyntheticHost(host), "/driver").nvidia_edits()


def test_a_driver_upgrade_is_found_at_the_next_call(host: Path) -> None:
    old = driver_version(host)
    stand_in_driver(host / "driver", old)
    us = DriverUserSpace(SyntheticHost(host), "/driver", Path("/hook"))
    assert us.find().version == old
    stand_in_driver(host / "driver", "999.1.2")
    (host / "sys/module/nvidia/version").write_text("999.1.2\n")
    (host / "proc/driver/nvidia/version").unlink()
    assert us.find().version == "999.1.2"
