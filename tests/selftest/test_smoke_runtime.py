"""The conformance kit's CUDA smoke check on the testbed's real runtime: containerd (its own
``ctr`` client, CDI) and runc start a container of an image with a C library and ``ldconfig``
(as a CUDA base image has), with the CDI spec ``kubeacc selftest`` writes: the stand-in
``libcuda.so.1`` of a synthetic driver root reaches the container read-only, the kube-acc hook
makes its ld cache list it, and the smoke program (kubeacc/native/cudasmoke.c) loads it by name
and calls cuInit, cuDeviceGetCount, cuMemAlloc and cuMemFree. A driver root without the library
and an image the runtime lacks fail the check, each with its reason."""

from __future__ import annotations

import io
import json
import tarfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.model import Device
from kubeacc.native import build
from kubeacc.selftest import prepare, smoke
from kubeacc.testbed.images import busybox_layer, write_image
from kubeacc.testbed.kubelet import make_device_nodes
from kubeacc.testbed.runtime import Containerd, ensure_runtime
from tests.cli.clirun import kubeacc
from tests.driverroot import LIB_DIR, driver_version, stand_in_driver
from tests.hosts import HostFactory, discover

pytestmark = pytest.mark.cluster

IMAGE = "kubeacc.local/glibc:1"
SMOKE = "CUDA smoke in a container"
#: The host's C library, its loader and ldconfig, where a Debian image has them, and the glibc
#: libraries the real libcuda.so.1 links against (its ldd on driver 580: libm, libdl,
#: libpthread, librt; without libm.so.6 its dlopen fails, as seen on an H100 node).
GLIBC_FILES = {
    "/lib64/ld-linux-x86-64.so.2": "lib64/ld-linux-x86-64.so.2",
    "/sbin/ldconfig": "sbin/ldconfig",
    **{
        f"/lib/x86_64-linux-gnu/{lib}": f"lib/x86_64-linux-gnu/{lib}"
        for lib in ("libc.so.6", "libm.so.6", "libdl.so.2", "libpthread.so.0", "librt.so.1")
    },
}


def glibc_layer() -> bytes:
    """busybox's layer plus a C library, its loader and ldconfig."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(busybox_layer())) as base,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for member in base.getmembers():
            tar.addfile(member, base.extractfile(member) if member.isfile() else None)
        for d in ("lib", "lib64", "lib/x86_64-linux-gnu", "sbin", "etc/ld.so.conf.d"):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for src, dst in GLIBC_FILES.items():
            data = Path(src).resolve().read_bytes()
            info = tarfile.TarInfo(dst)
            info.size, info.mode = len(data), 0o755
            tar.addfile(info, io.BytesIO(data))
        conf = b"include /etc/ld.so.conf.d/*.conf\n"
        info = tarfile.TarInfo("etc/ld.so.conf")
        info.size, info.mode = len(conf), 0o644
        tar.addfile(info, io.BytesIO(conf))
    return out.getvalue()


@pytest.fixture(scope="module")
def containerd(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Containerd]:
    work = tmp_path_factory.mktemp("containerd")
    (work / "logs").mkdir()
    runtime = Containerd(work, ensure_runtime(), [work / "cdi"], work / "logs")
    runtime.start()
    try:
        runtime.import_image(write_image(IMAGE, ["sh"], glibc_layer(), work / "glibc.tar"))
        yield runtime
    finally:
        runtime.shutdown()


def node(hosts: HostFactory, tmp_path: Path) -> tuple[Path, Path, Path, Device]:
    """A dgx-h100 host with a stand-in driver root, the hook and smoke program built, and its
    first GPU's device nodes made: (host, native dir, device root, the GPU)."""
    host = hosts.copy("dgx-h100")
    stand_in_driver(host / "driver", driver_version(host))
    native = tmp_path / "native"
    build.build_hook(native)
    build.build_smoke(native)
    devices = tmp_path / "devices"
    gpu = next(d for d in discover(host).devices if d.vendor == "NVIDIA")
    make_device_nodes(devices, gpu.device_nodes)
    (tmp_path / "cdi").mkdir()
    return host, native, devices, gpu


def gpu_bus(host: Path) -> str:
    gpu = next(d for d in discover(host).devices if d.vendor == "NVIDIA")
    assert gpu.pci is not None
    return gpu.pci.bus_id


def run_selftest(
    host: Path,
    tmp_path: Path,
    containerd: Containerd,
    native: Path,
    devices: Path,
    image: str = IMAGE,
    library: Path | None = None,
) -> tuple[int, dict[str, dict[str, str]]]:
    """The exit status and every check of the report, by name."""
    got = kubeacc(
        "selftest",
        f"--host-root={host}",
        "--driver-root=/driver",
        f"--cdi-dir={tmp_path / 'cdi'}",
        f"--cdi-hook={native / build.HOOK}",
        f"--device-root={devices}",
        f"--ctr={containerd.bin_dir / 'ctr'}",
        f"--containerd-address={containerd.socket}",
        f"--smoke-image={image}",
        f"--smoke-program={native / build.SMOKE}",
        f"--sharelimit-library={library or tmp_path / 'no-library.so'}",
        # The stand-in driver's GPU at the bus id of the host's first GPU (the library holds
        # the share of the unit with that bus id).
        f"--smoke-env=KUBEACC_STUB_GPUS={gpu_bus(host)}=16384",
        "-o",
        "json",
        home=tmp_path,
        timeout=300,
    )
    assert got.returncode in (0, 1), got.stderr
    return got.returncode, {c["name"]: c for c in json.loads(got.stdout)["checks"]}


def test_the_smoke_program_loads_the_driver_through_the_runtime(
    containerd: Containerd, hosts: HostFactory, tmp_path: Path
) -> None:
    host, native, devices, gpu = node(hosts, tmp_path)
    version = driver_version(host)
    rc, checks = run_selftest(host, tmp_path, containerd, native, devices)
    smoke = checks[SMOKE]
    assert smoke["status"] == "pass", smoke
    detail = smoke["detail"]
    assert f"GPU {gpu.pci.bus_id if gpu.pci else ''}, image {IMAGE}" in detail
    for step in ("cuInit 0", "devices 1", "cuMemAlloc 0", "cuMemFree 0", "smoke ok"):
        assert step in detail, detail
    assert not list(Path("/var/run/cdi").glob("kubeacc-selftest-*.json"))  # removed after
    assert not containerd.ctr("containers", "list", "--quiet").stdout.strip()  # --rm
    # The driver's own prepare of the whole GPU: its spec runs the smoke program too, and the
    # container reads the GPU's UUID from its metadata file; no library, no share check.
    whole = checks[prepare.WHOLE]
    assert whole["status"] == "pass", whole
    assert f"name {gpu.uuid}; spec and metadata removed at unprepare" in whole["detail"]
    assert checks[prepare.SHARE]["status"] == "skip"
    assert "shares are advisory here" in checks[prepare.SHARE]["detail"]
    assert not list(Path("/var/run/cdi").glob(f"*{prepare.POOL}*"))

    (host / "driver" / LIB_DIR / f"libcuda.so.{version}").unlink()
    rc, checks = run_selftest(host, tmp_path, containerd, native, devices)
    smoke = checks[SMOKE]
    assert rc == 1 and smoke["status"] == "fail"
    assert (
        "no driver user space to hand the container: driver root /driver: no libcuda"
        in (smoke["detail"])
    )


def test_a_memory_share_is_held_to_its_size_in_the_container_only_by_the_library(
    containerd: Containerd, hosts: HostFactory, tmp_path: Path
) -> None:
    host, native, devices, _ = node(hosts, tmp_path)
    library = build.build_library(native)
    rc, checks = run_selftest(host, tmp_path, containerd, native, devices, library=library)
    share = checks[prepare.SHARE]
    assert rc == 0 and share["status"] == "pass", share
    assert "sees 1024 MiB, 512 MiB allocated, 2048 MiB refused" in share["detail"]
    assert (
        "768 MiB beside a released VMM mapping and after a raw-fork child's exit"
        in (share["detail"])
    )
    assert not containerd.ctr("containers", "list", "--quiet").stdout.strip()

    # Another library in its place (it does not hold allocations): the check fails.
    _, nvml = build.build_stub(tmp_path / "stubs")
    rc, checks = run_selftest(host, tmp_path, containerd, native, devices, library=nvml)
    share = checks[prepare.SHARE]
    assert rc == 1 and share["status"] == "fail"
    assert "does not see its 1024 MiB share: memory total 16384 MiB" in share["detail"]


def test_an_image_the_runtime_lacks_fails_with_its_message(
    containerd: Containerd, hosts: HostFactory, tmp_path: Path
) -> None:
    host, native, devices, _ = node(hosts, tmp_path)
    rc, checks = run_selftest(host, tmp_path, containerd, native, devices, "kubeacc.local/absent:1")
    smoke = checks[SMOKE]
    assert rc == 1 and smoke["status"] == "fail"
    assert "image kubeacc.local/absent:1: exit 1:" in smoke["detail"]
    assert "not found" in smoke["detail"]


def test_the_self_tests_containers_are_confined(containerd: Containerd, tmp_path: Path) -> None:
    """Issue 43: the smoke image is treated as hostile. Its containers run under the runtime's
    default seccomp profile (ctr applies none unless asked) and without capabilities."""
    rt = smoke.Runtime(
        containerd.bin_dir / "ctr", containerd.socket, IMAGE, tmp_path / "none", namespace="k8s.io"
    )
    done = smoke.ctr(
        rt,
        "run",
        "--rm",
        *rt.run_args(),
        IMAGE,
        "kubeacc-selftest-confined",
        "sh",
        "-c",
        "grep -E '^(CapEff|CapBnd|Seccomp):' /proc/self/status",
    )
    assert done.returncode == 0, done.stderr
    status = dict(line.split(":\t", 1) for line in done.stdout.splitlines())
    assert status == {"CapEff": "0000000000000000", "CapBnd": "0000000000000000", "Seccomp": "2"}
