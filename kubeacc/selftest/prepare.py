"""The DRA driver's own prepare, in a container: the checks that show what a pod on this node
would get from kube-acc, without a cluster.

The driver (:class:`kubeacc.agent.dra.driver.Driver`, as the agent runs it) prepares two claims
for the first NVIDIA GPU, read from memory instead of the API server, into a state directory of
its own (the agent's checkpoint is not touched): the whole GPU, then a 1024 MiB memory share of
it. Each claim's CDI spec, written where ``ctr`` reads specs, starts a container of the smoke
image (``ctr run --device``) that prints its device metadata file and environment and runs the
smoke program; the claim is then unprepared, and its spec and metadata file must be gone.

* whole GPU: the smoke program passes (the driver's user space, device nodes and ld cache as
  the agent hands them), the metadata file names the GPU's UUID.
* memory share: the container sees 1024 MiB as the device's memory, 512 MiB are allocated and
  2048 MiB refused by the share-limit library (``--sharelimit-library``, as the agent copies
  it to ``<state-dir>/native``); skipped without the library (shares are then advisory).

The image needs ``sh`` and ``cat`` besides what the smoke check needs.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import uuid
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeacc.agent.dra import metadata
from kubeacc.agent.dra.devices import DeviceInfo, device_index
from kubeacc.agent.dra.driver import ClaimRef, Driver, PrepareResult
from kubeacc.agent.dra.sharing.limits import MEMORY
from kubeacc.contracts.names import DRIVER_NAME
from kubeacc.discovery import discover
from kubeacc.host import Host
from kubeacc.node.cdi import spec_path
from kubeacc.node.shareaccount import AccountService
from kubeacc.node.sharelimit import Limiter, install
from kubeacc.node.userspace.provider import DriverUserSpace
from kubeacc.selftest.report import Check, failed, passed, skipped
from kubeacc.selftest.smoke import CONTAINER_PROGRAM, OK_LINE, Runtime, ctr

WHOLE = "DRA prepare in a container: whole GPU"
SHARE = "DRA prepare in a container: memory share"
NAMESPACE = "kubeacc-selftest"
#: The node name the claims are allocated from (the driver checks results' pool against it).
POOL = "selftest"
SHARE_MIB = 1024
#: What the share's container allocates: within the share, then beyond it.
WITHIN_MIB, BEYOND_MIB = 512, 2048
OUT_OF_MEMORY = "cuMemAlloc 2"
#: The smoke program's ways around a share (kubeacc/native/cudasmoke.c) and the allocation
#: that must be refused in each: WAY_MIB held, WAY_MIB more asked.
WAY_MIB = 768
WAYS = {"vmm": "cuMemAlloc beside the mapping", "fork": "cuMemAlloc after the child exited"}
_SECTION = re.compile(r"^==kubeacc-selftest (\S+)$", re.MULTILINE)


@dataclass(frozen=True)
class _Claims:
    """The claim source of the driver: claims as the API server would return them."""

    objs: Mapping[str, dict[str, Any]]

    def get(self, namespace: str, name: str, uid: str) -> dict[str, Any] | None:
        obj = self.objs.get(name)
        return obj if obj is not None and namespace == NAMESPACE else None


def prepare_checks(
    rt: Runtime, us: DriverUserSpace, host: Host, library: Path, nvml: str = "auto"
) -> list[Check]:
    if rt.image is None:
        reason = "no --smoke-image given (an image with a C library, ldconfig, sh and cat)"
        return [skipped(WHOLE, reason), skipped(SHARE, reason)]
    if problem := rt.problem():
        return [failed(WHOLE, problem), failed(SHARE, problem)]
    index = device_index(discover(host, nvml=nvml))
    gpu = next((n for n, i in index.items() if i.nvidia_gpu and i.mig is None), None)
    if gpu is None:
        reason = "no NVIDIA GPU outside MIG mode on this node"
        return [skipped(WHOLE, reason), skipped(SHARE, reason)]
    with tempfile.TemporaryDirectory(prefix="kubeacc-selftest-") as tmp:
        state = Path(tmp)
        accounts = AccountService(state / "sharelimit")
        limiter = Limiter(install(library, state) if library.is_file() else None, accounts)
        result = {"driver": DRIVER_NAME, "pool": POOL, "device": gpu, "request": "gpu"}
        share = {
            **result,
            "shareID": str(uuid.uuid4()),
            "consumedCapacity": {MEMORY: f"{SHARE_MIB}Mi"},
        }
        claims = {"whole": _claim("whole", result), "share": _claim("share", share)}
        try:
            driver = Driver(
                POOL,
                _Claims({c["metadata"]["name"]: c for c in claims.values()}),
                lambda: index,
                cdi_dir=rt.spec_dir,
                state_dir=state / "state",
                device_root=rt.device_root,
                limiter=limiter,
                user_space=us,
            )
        except Exception as exc:
            why = f"the driver did not start: {exc}"
            return [failed(WHOLE, why), failed(SHARE, why)]
        driver.device_metadata = True
        info = index[gpu]
        out = [_whole(rt, driver, claims["whole"], info)]
        if limiter.library is None:
            out.append(
                skipped(SHARE, f"no share-limit library at {library}: shares are advisory here")
            )
        else:
            accounts.start()
            try:
                out.append(_share(rt, driver, claims["share"]))
            finally:
                accounts.stop()
        return out


def _claim(name: str, result: dict[str, Any]) -> dict[str, Any]:
    meta = {"name": f"selftest-{name}", "namespace": NAMESPACE, "uid": str(uuid.uuid4())}
    return {
        "metadata": meta,
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def _whole(rt: Runtime, driver: Driver, claim: dict[str, Any], info: DeviceInfo) -> Check:
    got = _in_container(rt, driver, claim, ["1"])
    if isinstance(got, str):
        return failed(WHOLE, got)
    smoke = got.get("smoke-1", "")
    if OK_LINE not in smoke:
        return failed(WHOLE, f"smoke program: {_last(smoke)}")
    if info.uuid and info.uuid not in got.get("metadata", ""):
        return failed(WHOLE, f"the device metadata file does not name {info.uuid}")
    if info.uuid and f"NVIDIA_VISIBLE_DEVICES={info.uuid}" not in got.get("env", ""):
        return failed(WHOLE, f"NVIDIA_VISIBLE_DEVICES is not {info.uuid}")
    return passed(
        WHOLE,
        f"GPU {info.bus_id}: smoke ok, metadata file and NVIDIA_VISIBLE_DEVICES name "
        f"{info.uuid or 'the GPU'}; spec and metadata removed at unprepare",
    )


def _share(rt: Runtime, driver: Driver, claim: dict[str, Any]) -> Check:
    ways = [f"{WAY_MIB} {way}" for way in WAYS]
    got = _in_container(rt, driver, claim, [str(WITHIN_MIB), str(BEYOND_MIB), *ways])
    if isinstance(got, str):
        return failed(SHARE, got)
    within, beyond = got.get(f"smoke-{WITHIN_MIB}", ""), got.get(f"smoke-{BEYOND_MIB}", "")
    total = f"memory total {SHARE_MIB} MiB"
    if total not in within:
        seen = next((ln for ln in within.splitlines() if ln.startswith("memory")), _last(within))
        return failed(SHARE, f"the container does not see its {SHARE_MIB} MiB share: {seen}")
    if OK_LINE not in within:
        return failed(SHARE, f"{WITHIN_MIB} MiB within the share: {_last(within)}")
    if OUT_OF_MEMORY not in beyond:
        return failed(SHARE, f"{BEYOND_MIB} MiB beyond the share was not refused: {_last(beyond)}")
    for way, refused in WAYS.items():  # issue 44's ways around a share, on this node's driver
        out = got.get(f"smoke-{WAY_MIB}-{way}", "")
        if f"{refused} 2" not in out:
            return failed(SHARE, f"{way}: {WAY_MIB} MiB more were not refused: {_last(out)}")
    return passed(
        SHARE,
        f"{SHARE_MIB} MiB share: the container sees {SHARE_MIB} MiB, {WITHIN_MIB} MiB "
        f"allocated, {BEYOND_MIB} MiB refused (out of memory), and {WAY_MIB} MiB beside a "
        f"released VMM mapping and after a raw-fork child's exit; spec and metadata removed",
    )


def _in_container(
    rt: Runtime, driver: Driver, claim: dict[str, Any], sizes: list[str]
) -> dict[str, str] | str:
    """Prepare the claim, run the container, unprepare: the container's output by section, or
    why it could not be had."""
    meta = claim["metadata"]
    ref = ClaimRef(meta["namespace"], meta["name"], meta["uid"])
    res: PrepareResult = driver.prepare([ref])[ref.uid]
    if res.error:
        return f"prepare: {res.error}"
    try:
        ids = [i for d in res.devices for i in d.cdi_device_ids]
        inside = metadata.container_path(claim, "gpu")
        script = "; ".join(
            [
                f"echo ==kubeacc-selftest metadata; cat {inside}",
                "echo ==kubeacc-selftest env; env",
                *(
                    f"echo ==kubeacc-selftest smoke-{s.replace(' ', '-')}; "
                    f"{CONTAINER_PROGRAM} {s} 2>&1"
                    for s in sizes
                ),
                "exit 0",
            ]
        )
        name = f"kubeacc-selftest-{meta['uid'][:8]}"
        try:
            done = ctr(
                rt,
                "run",
                "--rm",
                *rt.run_args(),
                *(a for i in ids for a in ("--device", i)),
                "--mount",
                f"type=bind,src={rt.program},dst={CONTAINER_PROGRAM},options=rbind:ro",
                rt.image or "",
                name,
                "sh",
                "-c",
                script,
            )
        except subprocess.TimeoutExpired:
            ctr(rt, "task", "kill", "--signal", "SIGKILL", name, check_timeout=False)
            ctr(rt, "containers", "rm", name, check_timeout=False)
            return f"the container did not end within {rt.timeout:.0f} s"
    finally:
        errors = driver.unprepare([ref])
    if errors.get(ref.uid):
        return f"unprepare: {errors[ref.uid]}"
    left = [
        str(p)
        for p in (
            spec_path(rt.spec_dir, ref.uid),
            metadata.host_path(driver.state_dir, ref.uid, "gpu"),
        )
        if p.exists()
    ]
    if left:
        return f"left after unprepare: {', '.join(left)}"
    sections = _sections(done.stdout)
    if done.returncode != 0 or not sections:
        return f"the container failed (exit {done.returncode}): {_last(done.stdout + done.stderr)}"
    return sections


def _sections(text: str) -> dict[str, str]:
    parts = _SECTION.split(text)
    return {parts[i]: parts[i + 1].strip() for i in range(1, len(parts) - 1, 2)}


def _last(text: str) -> str:
    lines = text.strip().splitlines()
    return lines[-1] if lines else "no output"
