"""What kubeacc-cdi-hook costs per container start; prints JSON.

Runs the hook as runc runs a ``createContainer`` hook (the state on stdin, a bundle whose
``config.json`` names the root) on a root file system like a CUDA base image's library side: the
stand-in driver libraries where the CDI mounts put them, the host's C library set in
``/usr/lib/x86_64-linux-gnu`` and ``/etc/ld.so.conf`` including ``ld.so.conf.d``, and Debian's
``ldconfig`` at ``/sbin/ldconfig`` (the image's, which only the hook of ``--ref`` runs). Each
run starts from a fresh copy of the root (no cache yet), as a new container does; the copy is
not timed. ``--ref REV`` also builds the hook of that revision (``git show``) and times it in
alternating rounds with the current one, so that a busy machine weighs on both alike.

    python bench/cdi_hook.py [--runs 200] [--ref 06cd02a]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

from kubeacc.native import build

LIB = "usr/lib/x86_64-linux-gnu"
VERSION = "550.54.15"
LINKS = (
    f"libcuda.so.{VERSION}::/{LIB}/libcuda.so.1",
    f"libcuda.so.1::/{LIB}/libcuda.so",
    f"libnvidia-ml.so.{VERSION}::/{LIB}/libnvidia-ml.so.1",
)


def template(top: Path) -> Path:
    """The root every run copies."""
    root = top / "template"
    lib = root / LIB
    lib.mkdir(parents=True)
    for d in ("etc/ld.so.conf.d", "sbin", "dev", "proc", "sys", "tmp"):
        (root / d).mkdir(parents=True, exist_ok=True)
    cuda, nvml = build.build_stub(top / "stubs")
    shutil.copy(cuda, lib / f"libcuda.so.{VERSION}")
    shutil.copy(nvml, lib / f"libnvidia-ml.so.{VERSION}")
    host_lib = Path("/") / LIB
    for name in ("libc.so.6", "libm.so.6", "libpthread.so.0", "libdl.so.2", "librt.so.1"):
        if (host_lib / name).exists():
            shutil.copy(host_lib / name, lib / name)
    (root / "etc/ld.so.conf").write_text("include /etc/ld.so.conf.d/*.conf\n")
    (root / "etc/ld.so.conf.d/x86_64-linux-gnu.conf").write_text(f"/{LIB}\n")
    shutil.copy("/sbin/ldconfig", root / "sbin/ldconfig")
    return root


def old_hook(ref: str, out: Path) -> Path:
    source = subprocess.run(
        ["git", "show", f"{ref}:kubeacc/native/cdihook.c"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    (out / "cdihook.c").write_text(source)
    flags = [f for f in build.PROGRAM_FLAGS]
    subprocess.run(
        [build.compiler(), *flags, "-o", str(out / "old-hook"), str(out / "cdihook.c")], check=True
    )
    return out / "old-hook"


def one(hook: Path, template_root: Path, bundle: Path, with_ldconfig: bool) -> float:
    root = bundle / "rootfs"
    if root.exists():
        shutil.rmtree(root)
    shutil.copytree(template_root, root, symlinks=True)
    args = [str(hook), "update-ldcache"]
    if with_ldconfig:
        args += ["--ldconfig", "/sbin/ldconfig"]
    args += ["--folder", f"/{LIB}"]
    for link in LINKS:
        args += ["--link", link]
    state = json.dumps({"ociVersion": "1.2.0", "id": "bench", "bundle": str(bundle)}).encode()
    t0 = time.perf_counter()
    done = subprocess.run(args, input=state, capture_output=True, env={}, check=False)
    took = time.perf_counter() - t0
    if done.returncode != 0:
        raise SystemExit(f"{hook}: {done.stderr.decode().strip()}")
    return took


def summary(samples: list[float]) -> dict[str, float]:
    ms = sorted(s * 1000 for s in samples)
    return {
        "p50_ms": round(statistics.median(ms), 2),
        "p99_ms": round(ms[min(len(ms) - 1, int(len(ms) * 0.99))], 2),
        "mean_ms": round(statistics.fmean(ms), 2),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--runs", type=int, default=200)
    ap.add_argument("--ref", help="also time the hook of this git revision")
    ns = ap.parse_args()
    if os.geteuid() != 0:
        raise SystemExit("the hook's sandbox needs root")
    with tempfile.TemporaryDirectory(prefix="kubeacc-bench-hook-") as tmp:
        top = Path(tmp)
        root = template(top)
        bundle = top / "bundle"
        bundle.mkdir()
        (bundle / "config.json").write_text(
            json.dumps({"ociVersion": "1.2.0", "root": {"path": "rootfs"}})
        )
        hooks = {"current": (build.build_hook(top / "hook"), True)}
        if ns.ref:
            hooks[ns.ref] = (old_hook(ns.ref, top), False)
        samples: dict[str, list[float]] = {name: [] for name in hooks}
        for _ in range(ns.runs):
            for name, (hook, with_ldconfig) in hooks.items():
                samples[name].append(one(hook, root, bundle, with_ldconfig))
        print(json.dumps({"runs": ns.runs, **{name: summary(s) for name, s in samples.items()}}))


if __name__ == "__main__":
    main()
