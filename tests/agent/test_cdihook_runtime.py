"""Hostile images against kubeacc-cdi-hook on the real runtime (containerd + runc of the
testbed), through the agent's CDI specs: a whole GPU and a memory share by DRA, a GPU by the
device plugin.

Each image is busybox plus what a hostile tenant would ship (its adversary: the image's every
file, link and variable, and the pod spec): an ``ldconfig`` at every path an image has one that
climbs out of a chroot and writes a file of the host; links planted at every path the hook
writes, pointing at a host file; ``/etc/ld.so.conf.d`` or the library directory as links to a
host directory (absolute and ``../`` forms); ``LD_PRELOAD`` in the image config and the pod
spec. Nothing outside the container's root may change: the host directory is compared entry by
entry before and after. A container either starts with the driver in its ld cache (a real
``ldconfig -p``, mounted from the host at a path the image does not use, lists it, and a probe
``dlopen``s ``libcuda.so.1``) or is refused with the hook's one line.
"""

from __future__ import annotations

import io
import tarfile
from pathlib import Path
from typing import Any

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Pod

from kubeacc.native import build
from kubeacc.testbed import Testbed
from kubeacc.testbed.images import busybox_layer, write_image
from tests.agent.dra.agentproc import AgentProcess
from tests.agent.dra.test_mig_e2e import gpu_claim
from tests.agent.runtimeprobe import SHARED_BDF, claimed, probe_log, probe_pod, share_claim
from tests.agent.test_real_runtime import host, wait_running
from tests.agent.test_userspace_runtime import GLIBC, dra_agent, driver, start, userland
from tests.driverroot import LIB_DIR
from tests.native.test_cdihook import HOSTILE, snapshot
from tests.testbed.helpers import eventually

pytestmark = pytest.mark.cluster
__all__ = ["dra_agent", "driver", "host", "userland"]  # fixtures

PROBE_LDCONFIG = "/opt/probe/ldconfig"
LINK_NAMES = ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1")
CONF_D = "etc/ld.so.conf.d"


def up(path: Path) -> str:
    """``path`` as a relative link from anywhere in a root: enough ``../`` to reach ``/``."""
    return "../" * 12 + str(path).lstrip("/")


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A directory of the host the images aim at, with a file of the host in it."""
    d = tmp_path / "victim"
    (d / "lib").mkdir(parents=True)
    (d / "passwd").write_text("the host's\n")
    return d


def layer(entries: dict[str, bytes | str]) -> bytes:
    """busybox's layer plus ``entries``: path -> file bytes, or a str: a symbolic link."""
    out = io.BytesIO()
    with (
        tarfile.open(fileobj=io.BytesIO(busybox_layer())) as base,
        tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar,
    ):
        for member in base.getmembers():
            tar.addfile(member, base.extractfile(member) if member.isfile() else None)
        dirs: set[str] = set()
        for path in entries:
            parts = path.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        for d in sorted(dirs - {"bin", "dev", "etc", "proc", "sys", "tmp"}):
            info = tarfile.TarInfo(d)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)
        for path, content in entries.items():
            info = tarfile.TarInfo(path)
            if isinstance(content, str):
                info.type, info.linkname, info.mode = tarfile.SYMTYPE, content, 0o777
                tar.addfile(info)
            else:
                info.size, info.mode = len(content), 0o755
                tar.addfile(info, io.BytesIO(content))
    return out.getvalue()


def hostile_image(
    tb: Testbed, tmp: Path, name: str, host_dir: Path, extra: dict[str, bytes | str]
) -> str:
    """An image ``name`` with the escaping ldconfig everywhere, LD_PRELOAD set, and ``extra``."""
    escape = tmp / "escape"
    if not escape.exists():
        mark = host_dir / "escaped"
        build.build_program(
            HOSTILE / "escape.c", escape, None, "-static", f'-DHOSTILE_MARK="{mark}"'
        )
    evil = escape.read_bytes()
    entries: dict[str, bytes | str] = {
        "sbin/ldconfig": evil,
        "usr/sbin/ldconfig": evil,
        "sbin/ldconfig.real": evil,
        "evil/preload.so": evil,
    }
    entries.update(extra)
    ref = f"kubeacc.local/hostile-{name}:1"
    config = {"Env": ["PATH=/bin", "LD_PRELOAD=/evil/preload.so", "LD_LIBRARY_PATH=/evil"]}
    image = write_image(ref, ["sh"], layer(entries), tmp / f"{name}.tar", config=config)
    tb.kubelet.containerd.import_image(image)
    return ref


def hostile_pod(name: str, ns: str, image: str, glibc: Path, **spec: Any) -> Any:
    script = (
        f"{PROBE_LDCONFIG} -p | grep -E 'libcuda|libnvidia'; echo ===; "
        "env | grep -E '^LD_' | sort; echo ===; "
        f"{GLIBC}/dlprobe 64 2>&1"
    )
    mounts = {
        "glibc": (GLIBC, {"hostPath": {"path": str(glibc)}}),
        "ldconfig": (PROBE_LDCONFIG, {"hostPath": {"path": "/sbin/ldconfig", "type": "File"}}),
    }
    env = {"KUBEACC_STUB_GPUS": f"{SHARED_BDF}=81559", "LD_PRELOAD": "/evil/preload.so"}
    pod = probe_pod(name, ns, script, mounts, env, **spec)
    pod.spec.containers[0].image = image
    return pod


def refusal(client: Client, name: str, ns: str) -> str:
    """The hook's refusal, as the kubelet reports the container's creation failing."""

    def waiting() -> str | None:
        pod = client.get(Pod, name, namespace=ns)
        for st in (pod.status.containerStatuses if pod.status else None) or []:
            w = st.state.waiting if st.state else None
            if w and w.message and "kubeacc-cdi-hook" in w.message:
                return w.message
        return None

    return eventually(waiting, 120, f"{name} refused by the hook")


def check_started(tb: Testbed, ns: str, pod: str) -> dict[str, str]:
    """The container's ld cache lists the driver and the probe loads it; its LD_ variables."""
    cache, env_part, probe = probe_log(tb, ns, pod).split("===\n")
    lib = f"/{LIB_DIR}"
    assert f"libcuda.so.1 (libc6,x86-64) => {lib}/libcuda.so.1" in cache, cache
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {lib}/libnvidia-ml.so.1" in cache, cache
    rows = [line.split() for line in probe.splitlines()]
    assert ["alloc", "0"] in rows, probe
    return dict(line.split("=", 1) for line in env_part.splitlines() if "=" in line)


def test_hostile_images_reach_nothing_of_the_host_through_dra(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    dra_agent: AgentProcess,
    userland: tuple[Path, Path, Path],
    host_dir: Path,
    tmp_path: Path,
) -> None:
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    lib = LIB_DIR.strip("/")
    planted: dict[str, bytes | str] = {f"{lib}/{n}": str(host_dir / "passwd") for n in LINK_NAMES}
    planted["etc/ld.so.cache"] = str(host_dir / "passwd")
    planted["etc/ld.so.conf.d/00-kubeacc-driver.conf"] = str(host_dir / "passwd")
    images = {
        # whole GPU: planted links at every path the hook writes; it starts, the links replaced
        "links": hostile_image(tb, tmp_path, "links", host_dir, planted),
        # a share: /etc/ld.so.conf.d a link to the host directory; refused
        "confabs": hostile_image(tb, tmp_path, "confabs", host_dir, {CONF_D: str(host_dir)}),
        # a whole GPU: the same, ../ form; refused
        "confrel": hostile_image(tb, tmp_path, "confrel", host_dir, {CONF_D: up(host_dir)}),
    }
    before = snapshot(host_dir)
    client.create(gpu_claim("whole", ns, "!device.allowMultipleAllocations"))
    client.create(share_claim("share", ns))
    client.create(share_claim("share2", ns))
    client.create(gpu_claim("whole2", ns, "!device.allowMultipleAllocations"))
    client.create(hostile_pod("links", ns, images["links"], userland[0], **claimed("whole")))
    client.create(hostile_pod("slinks", ns, images["links"], userland[0], **claimed("share2")))
    client.create(hostile_pod("confabs", ns, images["confabs"], userland[0], **claimed("share")))
    client.create(hostile_pod("confrel", ns, images["confrel"], userland[0], **claimed("whole2")))
    wait_running(client, "links", ns)
    wait_running(client, "slinks", ns)
    for pod in ("confabs", "confrel"):
        message = refusal(client, pod, ns)
        assert snapshot(host_dir) == before
        assert (
            "kubeacc-cdi-hook: refused: /etc/ld.so.conf.d in the container is a symbolic link"
            in message
        )
    check_started(tb, ns, "links")
    env = check_started(tb, ns, "slinks")
    # The pod's and the image's LD_PRELOAD give way to the share's (containerd applies the CDI
    # spec's variables over the process's); neither reaches the hook.
    assert env["LD_PRELOAD"].endswith("libkubeacc-sharelimit.so"), env
    assert snapshot(host_dir) == before
    for pod in ("links", "slinks", "confabs", "confrel"):
        client.delete(Pod, pod, namespace=ns, grace_period=0)


def test_hostile_images_reach_nothing_of_the_host_through_the_device_plugin(
    runtime_testbed: Testbed,
    runtime_namespace: str,
    host: Path,
    tmp_path: Path,
    userland: tuple[Path, Path, Path],
    driver: str,
    host_dir: Path,
) -> None:
    """The device plugin's CDI spec carries the same hook: the library directory's parent a
    ``../`` link to the host (runc and the hook both resolve it inside the root), planted links,
    the escaping ldconfig; it starts and nothing of the host changes."""
    tb, ns = runtime_testbed, runtime_namespace
    client = tb.client()
    config = tmp_path / "dp.yaml"
    config.write_text(
        "apiVersion: kubeacc.io/v1alpha1\nkind: DevicePluginConfig\ntypes: {gpu: {}}\ncdi: true\n"
    )
    lib = LIB_DIR.strip("/")
    parent = lib.rsplit("/", 1)[0]
    inside = f"{str(host_dir / 'lib').lstrip('/')}/{lib.rsplit('/', 1)[1]}"
    entries: dict[str, bytes | str] = {parent: up(host_dir / "lib")}
    entries.update({f"{inside}/{n}": str(host_dir / "passwd") for n in LINK_NAMES})
    image = hostile_image(tb, tmp_path, "dp", host_dir, entries)
    before = snapshot(host_dir)
    a = start(
        tb, host, tmp_path, userland, "--driver-root=/driver", f"--device-plugin-config={config}"
    )
    try:
        eventually(
            (tb.kubelet.device_plugin_dir / "kubeacc-gpu.sock").exists,
            60,
            "the kubeacc.io/gpu device plugin",
        )
        pod = hostile_pod(
            "dp-hostile",
            ns,
            image,
            userland[0],
            container={"resources": {"limits": {"kubeacc.io/gpu": "1"}}},
        )
        client.create(pod)
        wait_running(client, "dp-hostile", ns)
        assert snapshot(host_dir) == before
        check_started(tb, ns, "dp-hostile")
        client.delete(Pod, "dp-hostile", namespace=ns, grace_period=0)
    finally:
        a.stop()
