"""kubeacc-cdi-hook against container bundles laid out as runc has them when it runs
createContainer hooks (the state on stdin, the bundle's config.json naming the root file
system, the driver's libraries mounted there), the image hostile.

The adversary is the image a pod runs: every file, symbolic link and program in its root file
system, and the environment of its config and of the pod spec. The hook runs as root on the
host; nothing of the image may run as it, and nothing outside the container's root may be
created, changed or removed. Each hostile layout is checked against a "host" directory outside
the root (a snapshot of every entry, link and content before and after)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

import pytest

from kubeacc.native import build

LIB = "/usr/lib/x86_64-linux-gnu"
VERSION = "550.54.15"
LDCONFIG = Path("/sbin/ldconfig")
HOSTILE = Path(__file__).resolve().parent / "hostile"
LINKS = (
    f"libcuda.so.{VERSION}::{LIB}/libcuda.so.1",
    f"libcuda.so.1::{LIB}/libcuda.so",
    f"libnvidia-ml.so.{VERSION}::{LIB}/libnvidia-ml.so.1",
)

pytestmark = pytest.mark.skipif(
    os.geteuid() != 0 or not LDCONFIG.exists(),
    reason="the hook's sandbox needs root (mount namespaces) and a static ldconfig",
)


@pytest.fixture(scope="module")
def hook(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return build.build_hook(tmp_path_factory.mktemp("hook"))


@pytest.fixture(scope="module")
def stubs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    return build.build_stub(tmp_path_factory.mktemp("stubs"))


def program(source: str, out: Path, *defines: str, static: bool = True) -> Path:
    """A test program from tests/native/hostile, owned by root, mode 0755."""
    extra = ["-static"] if static else ["-shared", "-fPIC"]
    build.build_program(HOSTILE / source, out, None, *extra, *(f"-D{d}" for d in defines))
    out.chmod(0o755)
    return out


class Bundle:
    """A bundle whose root holds the driver's libraries (as the CDI mounts put them)."""

    def __init__(self, tmp: Path, stubs: tuple[Path, Path]) -> None:
        self.dir = tmp / "bundle"
        self.root = self.dir / "rootfs"
        self.lib = self.root / LIB.lstrip("/")
        self.lib.mkdir(parents=True)
        for d in ("etc", "dev", "proc", "sys", "tmp", "sbin"):
            (self.root / d).mkdir(exist_ok=True)
        shutil.copy(stubs[0], self.lib / f"libcuda.so.{VERSION}")
        shutil.copy(stubs[1], self.lib / f"libnvidia-ml.so.{VERSION}")
        self.config: dict[str, object] = {
            "ociVersion": "1.2.0",
            "process": {"env": ["HOME=/root"]},
            "root": {"path": "rootfs"},
        }
        self.write_config()

    def write_config(self) -> None:
        (self.dir / "config.json").write_text(json.dumps(self.config))

    def run(self, hook: Path, *args: str, env: dict[str, str] | None = None, wrap: str = "") -> Run:
        argv = [str(hook), "update-ldcache", *args]
        if not args:
            argv += ["--folder", LIB, *(a for link in LINKS for a in ("--link", link))]
        if wrap:  # a shell in a private mount namespace prepares it first, as runc would
            argv = [
                "unshare",
                "--mount",
                "--propagation",
                "private",
                "sh",
                "-c",
                wrap + ' && exec "$@"',
                "sh",
                *argv,
            ]
        state = {
            "ociVersion": "1.2.0",
            "id": "c1",
            "status": "creating",
            "pid": 1,
            "bundle": str(self.dir),
        }
        done = subprocess.run(
            argv,
            input=json.dumps(state),
            capture_output=True,
            text=True,
            timeout=90,
            check=False,
            env=env or {},
        )
        return Run(done.returncode, done.stderr)

    def cache(self) -> str:
        """``ldconfig -p`` of the container's cache."""
        return subprocess.run(
            [str(LDCONFIG), "-p", "-C", str(self.root / "etc/ld.so.cache")],
            capture_output=True,
            text=True,
            check=True,
        ).stdout


class Run:
    def __init__(self, rc: int, stderr: str) -> None:
        self.rc, self.stderr = rc, stderr


def snapshot(top: Path) -> dict[str, str]:
    """Every entry under ``top``: its kind and its content or link target."""
    out: dict[str, str] = {}
    for dirpath, dirnames, filenames in os.walk(top):
        for name in [*dirnames, *filenames]:
            p = Path(dirpath) / name
            if p.is_symlink():
                out[str(p)] = "link " + os.readlink(p)
            elif p.is_dir():
                out[str(p)] = "dir"
            else:
                out[str(p)] = "file " + p.read_bytes().hex()
    return out


@pytest.fixture
def host_dir(tmp_path: Path) -> Path:
    """A directory of the host, outside every root, with a file of the host in it."""
    d = tmp_path / "host"
    d.mkdir()
    (d / "passwd").write_text("the host's\n")
    return d


def assert_driver_in_cache(b: Bundle) -> None:
    listing = b.cache()
    assert f"libcuda.so.1 (libc6,x86-64) => {LIB}/libcuda.so.1" in listing, listing
    assert f"libnvidia-ml.so.1 (libc6,x86-64) => {LIB}/libnvidia-ml.so.1" in listing, listing
    assert f"libcuda.so (libc6,x86-64) => {LIB}/libcuda.so" in listing, listing


def test_the_containers_ld_cache_lists_the_driver(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path]
) -> None:
    b = Bundle(tmp_path, stubs)
    got = b.run(hook)
    assert got.rc == 0, got.stderr
    assert (b.root / "etc/ld.so.conf.d/00-kubeacc-driver.conf").read_text() == f"{LIB}\n"
    assert os.readlink(b.lib / "libcuda.so.1") == f"libcuda.so.{VERSION}"
    assert os.readlink(b.lib / "libcuda.so") == "libcuda.so.1"
    assert_driver_in_cache(b)
    assert not list(b.root.rglob(".*kubeacc-*")), "a temporary file left behind"
    # Run again (a restarted container): the same result, nothing doubled.
    assert b.run(hook).rc == 0
    assert_driver_in_cache(b)


def test_the_images_ldconfig_never_runs(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path
) -> None:
    """A static ldconfig that climbs out of a chroot and writes a host file, at every path an
    image's ldconfig has."""
    b = Bundle(tmp_path, stubs)
    mark = host_dir / "escaped"
    evil = program("escape.c", tmp_path / "escape", f'HOSTILE_MARK="{mark}"')
    for where in ("sbin/ldconfig", "usr/sbin/ldconfig", "sbin/ldconfig.real"):
        (b.root / where).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(evil, b.root / where)
    # The fixture itself works: run chrooted as root, as the old hook ran it, it escapes.
    subprocess.run(["chroot", str(b.root), "/sbin/ldconfig"], check=True, timeout=30)
    assert mark.read_text() == "escaped\n"
    mark.unlink()
    (b.root / ".kubeacc-escape").rmdir()
    before = snapshot(host_dir)
    got = b.run(hook)
    assert got.rc == 0, got.stderr
    assert snapshot(host_dir) == before
    assert not (b.root / ".kubeacc-escape").exists()
    assert_driver_in_cache(b)


def test_the_hook_takes_nothing_from_its_environment(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path
) -> None:
    """LD_PRELOAD (CVE-2025-23266's way in) and friends: the hook is static and reads none."""
    b = Bundle(tmp_path, stubs)
    mark = host_dir / "preloaded"
    lib = program("preload.c", tmp_path / "evil.so", f'HOSTILE_MARK="{mark}"', static=False)
    subprocess.run(["/bin/true"], env={"LD_PRELOAD": str(lib)}, check=True)
    assert mark.exists(), "the fixture's library does not mark when preloaded"
    mark.unlink()
    env = {
        "LD_PRELOAD": str(lib),
        "LD_LIBRARY_PATH": str(tmp_path),
        "PATH": str(tmp_path),
        "GCONV_PATH": "/x",
    }
    got = b.run(hook, env=env)
    assert got.rc == 0, got.stderr
    assert not mark.exists()
    assert_driver_in_cache(b)


def elf_interp(path: Path) -> bool:
    """Whether ``path`` has a program interpreter (a dynamic loader that honours LD_PRELOAD)."""
    data = path.read_bytes()
    phoff = int.from_bytes(data[32:40], "little")
    phentsize = int.from_bytes(data[54:56], "little")
    phnum = int.from_bytes(data[56:58], "little")
    types = [
        int.from_bytes(data[phoff + i * phentsize : phoff + i * phentsize + 4], "little")
        for i in range(phnum)
    ]
    return 3 in types  # PT_INTERP


def test_the_hook_is_a_static_program(hook: Path) -> None:
    assert not elf_interp(hook)
    assert elf_interp(Path("/bin/true").resolve())  # the check can tell


def hostile_layouts(host_dir: Path) -> dict[str, Callable[[Bundle], None]]:
    """Layouts an image can ship, each naming the host directory some way."""
    rel = "../" * 12 + str(host_dir).lstrip("/")

    def conf_abs(b: Bundle) -> None:
        (b.root / "etc/ld.so.conf.d").symlink_to(host_dir)

    def conf_rel(b: Bundle) -> None:
        (b.root / "etc/ld.so.conf.d").symlink_to(rel)

    def etc_abs(b: Bundle) -> None:
        shutil.rmtree(b.root / "etc")
        (b.root / "etc").symlink_to(host_dir)

    def conf_file_link(b: Bundle) -> None:
        (b.root / "etc/ld.so.conf.d").mkdir()
        (b.root / "etc/ld.so.conf.d/00-kubeacc-driver.conf").symlink_to(host_dir / "passwd")

    def cache_link(b: Bundle) -> None:
        (b.root / "etc/ld.so.cache").symlink_to(host_dir / "passwd")

    def planted_links(b: Bundle) -> None:
        for name in ("libcuda.so.1", "libcuda.so", "libnvidia-ml.so.1"):
            (b.lib / name).symlink_to(host_dir / "passwd")
        (b.lib / ".libcuda.so.kubeacc-1").symlink_to(host_dir / "passwd")

    def lib_dir_link(b: Bundle) -> None:
        # The library directory's parent a link to the host: the link paths lead there.
        shutil.rmtree(b.root / "usr/lib")
        (b.root / "usr/lib").symlink_to(rel)

    def tmp_names(b: Bundle) -> None:
        (b.root / "etc/ld.so.conf.d").mkdir()
        for pid in range(1, 4096, 7):
            (b.root / f"etc/ld.so.conf.d/.00-kubeacc-driver.conf.kubeacc-{pid}").symlink_to(
                host_dir / "new"
            )

    return {
        "conf.d absolute": conf_abs,
        "conf.d ../": conf_rel,
        "etc absolute": etc_abs,
        "conf file a link": conf_file_link,
        "cache a link": cache_link,
        "links planted": planted_links,
        "lib dir ../": lib_dir_link,
        "temporary names planted": tmp_names,
    }


@pytest.mark.parametrize("layout", list(hostile_layouts(Path("/x"))))
def test_nothing_outside_the_root_is_touched(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path, layout: str
) -> None:
    """Each hostile layout either works inside the root or is refused naming the path; the
    host directory is unchanged either way."""
    b = Bundle(tmp_path, stubs)
    hostile_layouts(host_dir)[layout](b)
    before = snapshot(host_dir)
    got = b.run(hook)
    assert snapshot(host_dir) == before, got.stderr
    if got.rc != 0:
        assert got.stderr.startswith("kubeacc-cdi-hook: refused: "), got.stderr
        assert "in the container is a symbolic link to a missing directory" in got.stderr
        assert got.stderr.count("\n") == 1
        return
    if layout != "lib dir ../":
        assert_driver_in_cache(b)


def test_a_link_inside_the_root_is_followed_as_the_container_sees_it(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path
) -> None:
    """/etc/ld.so.conf.d -> <host dir>, which the image also has: the image's copy is written."""
    b = Bundle(tmp_path, stubs)
    inside = b.root / str(host_dir).lstrip("/")
    inside.mkdir(parents=True)
    (b.root / "etc/ld.so.conf.d").symlink_to(host_dir)
    before = snapshot(host_dir)
    got = b.run(hook)
    assert got.rc == 0, got.stderr
    assert snapshot(host_dir) == before
    assert (inside / "00-kubeacc-driver.conf").read_text() == f"{LIB}\n"


def test_a_kernel_file_system_is_refused(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path]
) -> None:
    """The container's /proc is mounted when the hook runs: /etc/ld.so.conf.d -> /proc/sys/kernel
    would have the hook write a sysctl as root."""
    b = Bundle(tmp_path, stubs)
    (b.root / "etc/ld.so.conf.d").symlink_to("/proc/sys/kernel")
    got = b.run(hook, wrap=f"mount -t proc proc {b.root}/proc")
    assert got.rc == 1
    assert "refused: /etc/ld.so.conf.d in the container is on proc" in got.stderr


def test_ldconfig_runs_confined_as_nobody(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path
) -> None:
    """What the ldconfig sees: no privileges, no environment, no descriptor of the runtime, the
    container's root as its root (no host path, /proc and /sys covered)."""
    b = Bundle(tmp_path, stubs)
    (b.root / "etc/in-container").write_text("")
    spy = program("spy.c", tmp_path / "spy", f'SPY_HOST_PATH="{host_dir}"')
    got = b.run(
        hook, "--ldconfig", str(spy), "--folder", LIB, wrap=f"mount -t proc proc {b.root}/proc"
    )
    assert got.rc == 0, got.stderr
    lines = (b.root / "etc/ld.so.cache").read_text().splitlines()
    seen = dict(ln.rsplit(" ", 1) if ln.startswith("see ") else ln.split(" ", 1) for ln in lines)
    assert seen["uid"] == "65534 65534" and seen["gid"] == "65534 65534"
    assert seen["caps"] == "0 0 0" and seen["nnp"] == "1" and seen["env"] == "0"
    assert seen["fds"] in ("0 1 2", "0 1 2 3"), seen["fds"]  # 3: the sealed program itself
    assert seen["args"] == f"-X -C /dev/ld.so.cache {LIB}"
    assert seen["see /etc/in-container"] == "1"
    assert seen["see /proc/self"] == "0" and seen["see /sys/kernel"] == "0"
    assert seen[f"see {host_dir}"] == "0"


def test_an_ldconfig_that_hangs_is_killed(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path
) -> None:
    b = Bundle(tmp_path, stubs)
    spy = program("spy.c", tmp_path / "spy", f'SPY_HOST_PATH="{host_dir}"', "SPY_HANG")
    got = b.run(hook, "--ldconfig", str(spy), "--ldconfig-timeout", "2", "--folder", LIB)
    assert got.rc == 1
    assert "ldconfig did not finish in 2 s" in got.stderr


@pytest.mark.parametrize("real", [True, False])
def test_without_ldconfig_the_hosts_first_static_one_runs(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], real: bool
) -> None:
    """A spec without --ldconfig (an older agent's) takes the host's: on Ubuntu /sbin/ldconfig
    is a shell script beside the static /sbin/ldconfig.real (seen on a GPU node), which runs."""
    b = Bundle(tmp_path, stubs)
    shutil.copy(LDCONFIG, tmp_path / "ldconfig.real")
    wrap = (
        "mount -t tmpfs tmpfs /usr/sbin && printf '#!/bin/sh\\nexit 0\\n' >/usr/sbin/ldconfig && "
        "chmod 755 /usr/sbin/ldconfig"
    )
    if real:
        wrap += f" && cp {tmp_path}/ldconfig.real /usr/sbin/ldconfig.real"
    args = ("--folder", LIB, *(a for link in LINKS for a in ("--link", link)))
    got = b.run(hook, *args, wrap=wrap)
    if real:
        assert got.rc == 0, got.stderr
        assert_driver_in_cache(b)
    else:
        assert got.rc == 1
        assert got.stderr.startswith("kubeacc-cdi-hook: refused: no usable ldconfig on the host (")
        assert "/sbin/ldconfig: is not an ELF program" in got.stderr, got.stderr
        assert "/sbin/ldconfig.real: No such file or directory" in got.stderr, got.stderr


@pytest.mark.parametrize("kind", ["dynamic", "writable", "link", "missing", "not root's"])
def test_an_unsafe_ldconfig_is_refused(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], kind: str
) -> None:
    b = Bundle(tmp_path, stubs)
    path = tmp_path / "ldconfig"
    if kind == "dynamic":
        shutil.copy("/bin/true", path)
    elif kind in ("writable", "not root's"):
        shutil.copy(LDCONFIG, path)
        if kind == "writable":
            path.chmod(0o777)
        else:
            os.chown(path, 1000, 1000)
    elif kind == "link":
        path.symlink_to(LDCONFIG)
    got = b.run(hook, "--ldconfig", str(path), "--folder", LIB)
    assert got.rc == 1
    reason = {
        "dynamic": "is dynamically linked",
        "writable": "is not owned by root or is writable by others",
        "not root's": "is not owned by root or is writable by others",
        "link": "Too many levels of symbolic links",
        "missing": "No such file or directory",
    }[kind]
    assert f"ldconfig {path}" in got.stderr and reason in got.stderr, got.stderr
    assert not (b.root / "etc/ld.so.conf.d").exists(), (
        "the container was touched before the refusal"
    )


def test_the_config_is_parsed_as_json(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path], host_dir: Path
) -> None:
    """Strings a pod controls (env, annotations) that look like the root's path are not it."""
    b = Bundle(tmp_path, stubs)
    fake = {"path": str(host_dir)}
    b.config = {
        "ociVersion": "1.2.0",
        "process": {"env": [f'X="root": {json.dumps(fake)}'], "args": ["root", "path"]},
        "annotations": {"root": json.dumps(fake), "path": str(host_dir)},
        "mounts": [{"destination": "/x", "source": str(host_dir), "options": ["root"]}],
        "root": {"readonly": False, "path": "rootfs"},
    }
    b.write_config()
    text = (b.dir / "config.json").read_text().replace('"rootfs"', '"root\\u0066s"')
    (b.dir / "config.json").write_text(text)
    before = snapshot(host_dir)
    got = b.run(hook)
    assert got.rc == 0, got.stderr
    assert snapshot(host_dir) == before
    assert_driver_in_cache(b)


def test_bad_input_fails_with_a_message(
    hook: Path, tmp_path: Path, stubs: tuple[Path, Path]
) -> None:
    b = Bundle(tmp_path, stubs)

    def run(state: object, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [str(hook), "update-ldcache", *(args or ("--folder", LIB))]
        return subprocess.run(
            argv, input=json.dumps(state), capture_output=True, text=True, check=False
        )

    got = run({"id": "c1"})
    assert got.returncode == 1 and 'no "bundle" in the container state' in got.stderr
    got = run({"bundle": str(tmp_path / "gone")})
    assert got.returncode == 1 and "cannot open" in got.stderr and "config.json" in got.stderr
    (b.dir / "config.json").write_text('{"root": {"path": "rootf')
    got = run({"bundle": str(b.dir)})
    assert got.returncode == 1 and "no root.path in" in got.stderr
    for args in (
        ("--ldconfig-timeout", "0", "--folder", LIB),
        ("--folder", "lib"),
        ("--folder", f"{LIB}/../../etc"),
        ("--link", "x::/a/../b"),
        ("--link", "::/a"),
    ):
        got = run({"bundle": str(b.dir)}, *args)
        assert got.returncode == 2 and "expected" in got.stderr, (args, got.stderr)
    bad = subprocess.run([str(hook), "other"], capture_output=True, text=True, check=False)
    assert bad.returncode == 2 and "usage" in bad.stderr
