"""Finding the NVIDIA driver's user space under a driver root, through the host seam."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from kubeacc.agent.userspace.edits import container_edits, hook_args
from kubeacc.agent.userspace.nvidia import DriverRootError, find, module_version
from kubeacc.agent.userspace.provider import DriverUserSpace, UserSpaceMode
from kubeacc.host.files import HostRoot
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
