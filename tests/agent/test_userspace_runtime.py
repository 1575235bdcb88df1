"""The NVIDIA driver's user space reaching real containers (containerd + runc) through the
CDI specs alone.

The synthetic host has a driver root (``/driver`` in its tree) holding real ELF libraries under
the names of the kernel module's version: the stand-in ``libcuda.so.<version>`` and
``libnvidia-ml.so.<version>`` of kubeacc/native. The pod names neither the libraries nor their
directory: they come as read-only mounts of the CDI spec, and kubeacc-cdi-hook (a
``createContainer`` hook of the same spec) makes the container's ld cache list them. The
workload image is static busybox, so the pod brings what a CUDA base image has: a C library
and its loader (``/opt/glibc``, with the probe program) and ``ldconfig`` (``/sbin/ldconfig``).
The probe dlopens ``libcuda.so.1`` and ``libnvidia-ml.so.1`` by those names, as the CUDA
runtime does, with no ``LD_LIBRARY_PATH``: only the ld cache can lead the loader to them.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Event, Pod

from kubeacc.native import build
from kubeacc.synthetic import profiles
from kubeacc.synthetic.mig_hw import MAX_COMPUTE_INSTANCES, MAX_GPU_INSTANCES, cap_minor
from kubeacc.testbed import Testbed
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.dra.test_mig_e2e import MIG_CLASS, PROFILE_3G, gpu_claim
from tests.agent.runtimeprobe import (
    SHARED_BDF,
    claimed,
    copy_glibc,
    probe_log,
    probe_pod,
    share_claim,
    start_agent,
)
from tests.agent.test_real_runtime import host, one_gpu_claim, wait_running
from tests.driverroot import LIB_DIR, driver_version, stand_in_driver
from tests.hosts import discover
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster
__all__ = ["host"]  # the fixture

GLIBC = "/opt/glibc"
NATIVE = Path(__file__).resolve().parent.parent / "native"


@pytest.fixture(scope="module")
def userland(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(the C library dir with the probe, the CDI hook, the share-limit library)."""
    out = tmp_path_factory.mktemp("userland")
    glibc = out / "glibc"
    glibc.mkdir()
    copy_glibc(glibc)
    build.build_program(
        NATIVE / "dlprobe.c",
        glibc / "dlprobe",
        None,
        f"-Wl,--dynamic-linker={GLIBC}/ld-linux-x86-64.so.2",
        f"-Wl,-rpath,{GLIBC}",
    )
    glibc.chmod(0o755)
    return glibc, build.build_hook(out / "native"), build.build_library(out / "native")


def userspace_pod(name: str, ns: str, glibc: Path, **spec: Any) -> Any:
    script = (
        "/sbin/ldconfig -p | grep -E 'libcuda|libnvidia'; echo ===; "
        "env | grep -E '^(NVIDIA|KUBEACC_NVIDIA|LD_PRELOAD)' | sort; echo ===; "
        f"{GLIBC}/dlprobe 64 2>&1"
    )
    mounts = {
        "glibc": (GLIBC, {"hostPath": {"path": str(glibc)}}),
        "ldconfig": ("/sbin/ldconfig", {"hostPath": {"path": "/sbin/ldconfig", "type": "File"}}),
    }
    return probe_pod(name, ns, script, mounts, {"KUBEACC_STUB_GPUS": f"{SHARED_BDF}=81559"}, **spec)


def probe_output(tb: Testbed, ns: str, pod: str) -> tuple[str, dict[str, str], str]:
    """(what ldconfig -p listed, the NVIDIA environment, what the probe printed)."""
    cache, env_part, probe = probe_log(tb, ns, pod).split("===\n")
    env = dict(line.split("=", 1) for line in env_part.splitlines() if "=" in line)
    return cache, env, probe


def start(
    tb: Testbed, host: Path, tmp_path: Path, userland: tuple[Path, Path, Path], *extra: str
) -> AgentProcess:
    return start_agent(
        tb,
        host,
        tmp_path,
        "--driver-user-space=cdi",
        f"--cdi-hook={userland[1]}",
        f"--sharelimit-library={userland[2]}",
        *extra,
    )


@pytest.fixture
def driver(host: Path) -> str:
    """The driver version, its user space under ``/driver`` of the host."""
    version = driver_version(host)
    stand_in_driver(host / "driver", version)
    return version


@pytest.fixture
def dra_agent(
    runtime_testbed: Testbed,
    host: Path,
    tmp_path: Path,
    userland: tuple[Path, Path, Path],
    driver: str,
) -> Iterator[AgentProcess]:
    a = start(
        runtime_testbed,
        host,
        tmp_path,
        userland,
        "--driver-root=/driver",
        f"--memory-shared=pci={SHARED_BDF}",
    )
    try:
        a.wait_registered()
        yield a
    finally:
        a.stop()


def check_probe(tb: Testbed, ns: str, pod: str, version: str) -> dict[str, str]:
    cache, env, probe = probe_output(tb, ns, pod)
    lib = f"/{LIB_DIR}"
    assert f"libcuda.so.1 (libc6,x86-64) => {lib}/libcuda.so.1" in cache, cache
    assert f"libcuda.so (libc6,x86-64) => {lib}/libcuda.so" in cache, cache
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {lib}/libnvidia-ml.so.1" in cache, cache
    assert env["KUBEACC_NVIDIA_DRIVER_VERSION"] == version
    rows = [line.split() for line in probe.splitlines()]
    assert ["alloc", "0"] in rows, probe  # dlopen("libcuda.so.1"), a context, an allocation
    assert any(r[:2] == ["nvml", "0"] for r in rows), probe
    return env


def test_a_whole_gpu_and_a_share_load_the_driver_through_the_cdi_spec(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    dra_agent: AgentProcess,
    userland: tuple[Path, Path, Path],
    driver: str,
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    client.create(gpu_claim("whole", ns, "!device.allowMultipleAllocations"))
    client.create(share_claim("share", ns))
    client.create(userspace_pod("whole", ns, userland[0], **claimed("whole")))
    client.create(userspace_pod("share", ns, userland[0], **claimed("share")))
    wait_running(client, "whole", ns)
    wait_running(client, "share", ns)
    env = check_probe(tb, ns, "whole", driver)
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    env = check_probe(tb, ns, "share", driver)
    assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
    assert env["LD_PRELOAD"].endswith("libkubeacc-sharelimit.so")  # the share's limits too
    assert "driver user space" in dra_agent.log()
    for pod in ("whole", "share"):
        client.delete(Pod, pod, namespace=ns, grace_period=0)


def test_a_device_plugin_gpu_loads_the_driver_through_the_cdi_spec(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    host: Path,
    tmp_path: Path,
    userland: tuple[Path, Path, Path],
    driver: str,
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client: Client = tb.client()
    config = tmp_path / "dp.yaml"
    config.write_text(
        "apiVersion: kubeacc.io/v1alpha1\nkind: DevicePluginConfig\ntypes: {gpu: {}}\ncdi: true\n"
    )
    a = start(
        tb, host, tmp_path, userland, "--driver-root=/driver", f"--device-plugin-config={config}"
    )
    try:
        eventually(
            (tb.kubelet.device_plugin_dir / "kubeacc-gpu.sock").exists,
            60,
            "the kubeacc.io/gpu device plugin",
        )
        pod = userspace_pod(
            "dp-gpu",
            ns,
            userland[0],
            container={"resources": {"limits": {"kubeacc.io/gpu": "1"}}},
        )
        client.create(pod)
        wait_running(client, "dp-gpu", ns)
        env = check_probe(tb, ns, "dp-gpu", driver)
        assert env["NVIDIA_VISIBLE_DEVICES"].startswith("GPU-")
        client.delete(Pod, "dp-gpu", namespace=ns, grace_period=0)
    finally:
        a.stop()


def test_a_wrong_driver_root_fails_the_claim_with_its_path(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    host: Path,
    tmp_path: Path,
    userland: tuple[Path, Path, Path],
    driver: str,
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    a = start(tb, host, tmp_path, userland, "--driver-root=/run/nvidia/driver")
    try:
        a.wait_registered()
        assert "NVIDIA driver user space not found (--driver-root /run/nvidia/driver)" in a.log()
        client.create(one_gpu_claim("wrong", ns))
        client.create(userspace_pod("wrong", ns, userland[0], **claimed("wrong")))

        def refused() -> str | None:
            for e in client.list(Event, namespace=ns, fields={"involvedObject.name": "wrong"}):
                if "NVIDIA driver user space" in (e.message or ""):
                    return e.message
            return None

        message = eventually(refused, 120, "the prepare error")
    finally:
        a.stop()
    assert "driver root /run/nvidia/driver" in message and "is not a directory" in message
    status = client.get(Pod, "wrong", namespace=ns).status
    statuses = (status.containerStatuses if status else None) or []
    assert not any(st.state and st.state.running for st in statuses)


@pytest.fixture
def mig_host(runtime_testbed: Testbed, tmp_path: Path) -> Path:
    """Two MIG-mode GPUs; every node an instance of theirs can have exists for real."""
    root = profiles.build("mig-pair", tmp_path / "mig-host")
    nodes = {n for d in discover(root).devices for n in d.device_nodes}
    nodes |= {
        f"/dev/nvidia-caps/nvidia-cap{cap_minor(gpu, gi, ci)}"
        for gpu in (0, 1)
        for gi in range(MAX_GPU_INSTANCES)
        for ci in (None, *range(MAX_COMPUTE_INSTANCES))
    }
    runtime_testbed.kubelet.mknod(sorted(nodes))
    stand_in_driver(root / "driver", driver_version(root))
    return root


def test_a_mig_partition_loads_the_driver_through_the_cdi_spec(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    mig_host: Path,
    tmp_path: Path,
    userland: tuple[Path, Path, Path],
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    a = start(tb, mig_host, tmp_path, userland, "--driver-root=/driver")
    try:
        a.wait_registered()
        client.create(gpu_claim("part", ns, PROFILE_3G, MIG_CLASS))
        client.create(userspace_pod("part", ns, userland[0], **claimed("part")))
        wait_running(client, "part", ns)
        env = check_probe(tb, ns, "part", driver_version(mig_host))
        assert env["NVIDIA_VISIBLE_DEVICES"].startswith("MIG-")
        client.delete(Pod, "part", namespace=ns, grace_period=0)
    finally:
        a.stop()
