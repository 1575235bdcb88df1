"""The share-limit library against the stand-in CUDA driver: every covered allocation entry point
is held to the share, memory queries report it, frees return it, threads and forked children
cannot exceed it, several devices keep their own, and a malformed limit fails closed."""

from __future__ import annotations

import shutil
import signal
import subprocess
import time
from pathlib import Path

import pytest

from kubeacc.node.shareaccount import SOCKET_NAME, AccountService
from tests.native.conftest import Native

OOM = 2  # CUDA_ERROR_OUT_OF_MEMORY
GPU_A, GPU_B = "0000:3b:00.0", "0000:86:00.0"
TWO_GPUS = f"{GPU_A}=16384,{GPU_B}=8192"


def results(proc: subprocess.CompletedProcess[str]) -> list[list[str]]:
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return [line.split() for line in proc.stdout.splitlines()]


def codes(proc: subprocess.CompletedProcess[str]) -> list[int]:
    return [int(r[1]) for r in results(proc) if len(r) > 1]


# Each entry point: (command to allocate about 600 MiB, command for about 500 MiB).
ENTRY_POINTS = {
    "cuMemAlloc_v2": (["alloc", 600], ["alloc", 500]),
    "cuMemAlloc (32-bit)": (["alloc32", 600], ["alloc32", 500]),
    "cuMemAllocManaged": (["managed", 600], ["managed", 500]),
    "cuMemAllocAsync": (["async", 600], ["async", 500]),
    "cuMemAllocFromPoolAsync": (["pool", 600], ["pool", 500]),
    "via cuGetProcAddress_v2": (["gpa", 600], ["gpa", 500]),
    "cuMemAllocPitch_v2": (["pitch", 1000, 600 << 10], ["pitch", 1000, 500 << 10]),
    "cuArrayCreate_v2": (["array", 1 << 15, 4800], ["array", 1 << 15, 4000]),
    "cuArray3DCreate_v2": (["array3d", 1 << 10, 1 << 10, 150], ["array3d", 1 << 10, 1 << 10, 125]),
    "cuMipmappedArrayCreate": (["mipmap", 8192, 14000, 4], ["mipmap", 8192, 11000, 4]),
    "cuMemCreate": (["vmm", 0, 600], ["vmm", 0, 500]),
}


@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_each_entry_point_is_held_to_the_share_and_its_free_returns_it(
    native: Native, entry: str
) -> None:
    big, small = ENTRY_POINTS[entry]
    proc = native.run("ctx", 0, *big, *small, "free", 0, *small, KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert codes(proc) == [0, 0, OOM, 0, 0], proc.stdout
    assert "refused: unit 0's share is 1024 MiB" in proc.stderr
    # Without the library the stand-in driver has room for both.
    assert codes(native.run("ctx", 0, *big, *small, preload=False)) == [0, 0, 0]


def test_memory_queries_report_the_share(native: Native) -> None:
    proc = native.run(
        "ctx",
        0,
        "info",
        "total",
        0,
        "nvml",
        0,
        "alloc",
        100,
        "info",
        "nvml",
        0,
        KUBEACC_DEVICE_MEMORY_LIMIT="1024",
    )
    rows = results(proc)
    assert rows[1] == ["info", "0", "1024", "1024"]
    assert rows[2] == ["total", "0", "1024"]
    assert rows[3] == ["nvml", "0", "1024", "1024", "1024", "1024"]
    assert rows[5] == ["info", "0", "924", "1024"]
    assert rows[6] == ["nvml", "0", "1024", "924", "1024", "924"]
    whole = results(native.run("ctx", 0, "info", "total", 0, "nvml", 0, preload=False))
    assert whole[1:] == [
        ["info", "0", "16384", "16384"],
        ["total", "0", "16384"],
        ["nvml", "0", "16384", "16384", "16384", "16384"],
    ]


def test_racing_threads_never_exceed_the_share(native: Native) -> None:
    for _ in range(3):
        rows = results(
            native.run("ctx", 0, "race", 16, 3, "info", KUBEACC_DEVICE_MEMORY_LIMIT="1000")
        )
        assert rows[1] == ["race", "0", "999"]  # 333 chunks of 3 MiB, not one more
        assert rows[2] == ["info", "0", "1", "1000"]


@pytest.mark.parametrize("shared", [False, True], ids=["per-process", "container-account"])
def test_a_forked_child_keeps_the_accounting(
    native: Native, accounts: AccountService, shared: bool
) -> None:
    env = {"KUBEACC_DEVICE_MEMORY_LIMIT": "1000"}
    if shared:
        env |= share(accounts, "c1", "1000")
    proc = native.run("ctx", 0, "alloc", 600, "fork", "alloc", 500, "alloc", 300, "info", **env)
    rows = results(proc)
    # The child's lines come first (the parent waits for it): 600 of the parent's still count.
    assert rows[1:] == [
        ["alloc", "0"],
        ["alloc", "2"],
        ["alloc", "0"],
        ["info", "0", "100", "1000"],
        ["fork", "0"],
    ]


def test_two_devices_keep_separate_limits_matched_by_bus_id(native: Native) -> None:
    # Units listed in the other order than CUDA numbers the devices: the bus id decides.
    env = {
        "KUBEACC_STUB_GPUS": TWO_GPUS,
        "ACCELERATOR_UNITS": f"{GPU_B},{GPU_A}",
        "KUBEACC_DEVICE_MEMORY_LIMIT": "512,1024",
    }
    proc = native.run(
        "ctx",
        0,
        "alloc",
        1000,
        "info",
        "ctx",
        1,
        "alloc",
        500,
        "alloc",
        100,
        "info",
        "total",
        0,
        "total",
        1,
        "nvml",
        0,
        "nvml",
        1,
        **env,
    )
    rows = results(proc)
    assert [r[:2] for r in rows[:7]] == [
        ["ctx", "0"],
        ["alloc", "0"],
        ["info", "0"],
        ["ctx", "0"],
        ["alloc", "0"],
        ["alloc", "2"],
        ["info", "0"],
    ]
    assert rows[2][2:] == ["24", "1024"] and rows[6][2:] == ["12", "512"]
    assert rows[7] == ["total", "0", "1024"] and rows[8] == ["total", "0", "512"]
    assert rows[9][2] == "1024" and rows[10][2] == "512"


def test_a_device_that_is_not_a_unit_gets_nothing(native: Native) -> None:
    env = {
        "KUBEACC_STUB_GPUS": TWO_GPUS,
        "ACCELERATOR_UNITS": GPU_B,
        "KUBEACC_DEVICE_MEMORY_LIMIT": "512",
    }
    proc = native.run("ctx", 0, "alloc", 1, "ctx", 1, "alloc", 1, **env)
    assert codes(proc) == [0, OOM, 0, 0]
    assert "not one of the share's units" in proc.stderr


@pytest.mark.parametrize(
    "env",
    [
        {"KUBEACC_DEVICE_MEMORY_LIMIT": ""},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "abc"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "0"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024,,512"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024Mi"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "-5"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "99999999999999999"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024", "ACCELERATOR_UNITS": f"{GPU_A},{GPU_B}"},
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024", "KUBEACC_SHARELIMIT_SOCKET": "relative/sock"},
        # A share prepared by an older agent (an account file): not one account per process.
        {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024", "KUBEACC_SHARELIMIT_ID": "x"},
    ],
    ids=lambda e: ",".join(f"{k}={v}" for k, v in e.items()),
)
def test_a_malformed_limit_fails_closed(native: Native, env: dict[str, str]) -> None:
    proc = native.run("ctx", 0, "alloc", 1, "managed", 1, "vmm", 0, 1, "info", **env)
    assert codes(proc) == [0, OOM, OOM, OOM, 0]
    messages = [line for line in proc.stderr.splitlines() if "will fail" in line]
    assert len(messages) == 1, proc.stderr
    assert messages[0].startswith("kubeacc-sharelimit: ")


def test_no_limit_is_no_change(native: Native) -> None:
    proc = native.run("ctx", 0, "alloc", 16000, "info")
    assert results(proc)[1:] == [["alloc", "0"], ["info", "0", "384", "16384"]]
    assert proc.stderr == ""


def share(accounts: AccountService, name: str, limits: str) -> dict[str, str]:
    """The variables of a share whose processes keep one account in the service."""
    d = accounts.open(name, limits)
    return {"KUBEACC_SHARELIMIT_SOCKET": str(d / SOCKET_NAME)}


def account(native: Native, accounts: AccountService, name: str) -> dict[str, str]:
    """A process environment whose processes keep one account (1000 MiB) in the service."""
    return native.env(KUBEACC_DEVICE_MEMORY_LIMIT="1000", **share(accounts, name, "1000"))


def start(native: Native, env: dict[str, str], *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(native.probe), *args],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def test_processes_of_a_container_share_one_account(
    native: Native, accounts: AccountService
) -> None:
    env = account(native, accounts, "claim-1")
    first = start(native, env, "ctx", "0", "alloc", "600", "pause", "info")
    assert first.stdout is not None and first.stdin is not None
    try:
        assert [first.stdout.readline().split() for _ in range(3)] == [
            ["ctx", "0"],
            ["alloc", "0"],
            ["pause"],
        ]
        second = subprocess.run(
            [str(native.probe), "ctx", "0", "alloc", "500", "alloc", "400", "info"],
            env=env,
            capture_output=True,
            text=True,
            check=False,
        )
        assert results(second)[1:] == [["alloc", "2"], ["alloc", "0"], ["info", "0", "0", "1000"]]
        # The second process has ended: its 400 MiB are back.
        first.stdin.write("\n")
        first.stdin.flush()
        assert first.stdout.readline().split() == ["info", "0", "400", "1000"]
        assert first.wait(10) == 0
    finally:
        first.kill()
    # All ended: everything is back.
    assert codes(native.run("ctx", 0, "alloc", 1000, **env)) == [0, 0]


def test_a_killed_process_gives_its_share_back(native: Native, accounts: AccountService) -> None:
    env = account(native, accounts, "claim-2")
    victim = start(native, env, "ctx", "0", "alloc", "900", "pause")
    assert victim.stdout is not None
    try:
        assert victim.stdout.readline().split() == ["ctx", "0"]
        assert victim.stdout.readline().split() == ["alloc", "0"]
        assert codes(native.run("ctx", 0, "alloc", 200, **env)) == [0, OOM]
        victim.send_signal(signal.SIGKILL)
        victim.wait(10)
    finally:
        victim.kill()
    assert codes(native.run("ctx", 0, "alloc", 1000, **env)) == [0, 0]


def test_a_program_that_opens_the_driver_itself_is_held_too(native: Native) -> None:
    """The CUDA runtime's way: dlopen(RTLD_LOCAL), dlsym on that handle, cuGetProcAddress."""
    proc = native.run_program(native.dlprobe, 600, 500, 400, KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert results(proc) == [
        ["alloc", "0"],
        ["alloc", "2"],
        ["alloc", "0"],
        ["info", "0", "24", "1024"],
        ["nvml", "0", "1024"],
    ]
    whole = native.run_program(native.dlprobe, 600, 500, preload=False)
    assert results(whole) == [
        ["alloc", "0"],
        ["alloc", "0"],
        ["info", "0", "15284", "16384"],
        ["nvml", "0", "16384"],
    ]


# ---- issue 44: paths by which a container's processes got memory beyond the share ----


def held(proc: subprocess.CompletedProcess[str]) -> int:
    """The MiB the stand-in driver holds for the probe (its last ``held`` line)."""
    return [int(r[1]) for r in results(proc) if r[0] == "held"][-1]


def test_vmm_memory_counts_until_its_handle_is_released_and_its_last_mapping_unmapped(
    native: Native,
) -> None:
    """cuMemCreate -> cuMemMap -> cuMemRelease: the mapping keeps the memory alive (the driver
    frees it at the last unmap), so the share must too."""
    limit = {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024"}
    # handles: 0 the allocation, 1 its mapping; released first, then unmapped.
    proc = native.run(
        "ctx", 0, "vmm", 0, 1000, "map", 0, "free", 0, "alloc", 1000, "held", 0,
        "free", 1, "held", 0, "alloc", 1000, **limit,
    )  # fmt: skip
    assert codes(proc) == [0, 0, 0, 0, OOM, 1000, 0, 0, 0], proc.stdout
    # Unmapped first, then released; and a retained reference (cuMemRetainAllocationHandle)
    # keeps it too until that reference is released.
    proc = native.run(
        "ctx", 0, "vmm", 0, 600, "map", 0, "retain", 1, "free", 1, "free", 0, "alloc", 500,
        "free", 2, "alloc", 500, "held", 0, **limit,
    )  # fmt: skip
    assert codes(proc) == [0, 0, 0, 0, 0, 0, OOM, 0, 0, 500], proc.stdout


def test_vmm_create_map_release_rounds_get_nothing_beyond_the_share(native: Native) -> None:
    """The issue's pattern: 16 rounds of a 1024 MiB cuMemCreate, mapped, then released."""
    args: list[object] = ["ctx", 0]
    for k in range(16):
        args += ["vmm", 0, 1024, "map", 2 * k, "free", 2 * k]
    proc = native.run(*args, "held", 0, KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert held(proc) <= 1024, proc.stdout


def test_graph_memory_nodes_are_held_to_the_share(native: Native) -> None:
    limit = {"KUBEACC_DEVICE_MEMORY_LIMIT": "1024"}
    proc = native.run("ctx", 0, "graph", *["galloc", 0, 1024] * 4, "held", 0, **limit)
    assert codes(proc) == [0, 0, 0, OOM, OOM, OOM, 1024], proc.stdout
    # Freed by a free node: counted while the graph or an executable graph made from it lives.
    proc = native.run(
        "ctx", 0, "graph", "galloc", 0, 600, "gfree", 0, "ginst", "alloc", 600, "gdestroy",
        "alloc", 600, "free", 1, "alloc", 600, "held", 0, **limit,
    )  # fmt: skip
    assert codes(proc) == [0, 0, 0, 0, 0, OOM, 0, OOM, 0, 0, 600], proc.stdout
    # Not freed in a graph: counted until cuMemFree, also after the graph is gone.
    proc = native.run(
        "ctx", 0, "graph", "galloc", 0, 600, "gdestroy", "alloc", 600, "free", 0, "alloc", 600,
        "held", 0, **limit,
    )  # fmt: skip
    assert codes(proc) == [0, 0, 0, 0, OOM, 0, 0, 600], proc.stdout


@pytest.mark.parametrize("how", ["rawforkexit", "vforkexit", "forkexit"])
def test_a_child_that_exits_does_not_return_its_parents_share(
    native: Native, accounts: AccountService, how: str
) -> None:
    """A child made by syscall(SYS_fork) or vfork runs no fork handlers; its exit must not give
    back the parent's slot (3 rounds of the issue: +3,072 MiB)."""
    env = share(accounts, "f", "1024")
    proc = native.run(
        "ctx", 0, "alloc", 1000, *[how, "alloc", 1000] * 3, "held", 0,
        KUBEACC_DEVICE_MEMORY_LIMIT="1024", **env,
    )  # fmt: skip
    assert codes(proc) == [0, 0, 0, OOM, 0, OOM, 0, OOM, 1000], proc.stdout


@pytest.mark.parametrize("how", ["rawforkalloc", "forkalloc"])
def test_a_child_made_by_any_means_gets_its_own_slot(
    native: Native, accounts: AccountService, how: str
) -> None:
    """The child's allocations are its own: gone with it, and the parent's stay counted."""
    env = share(accounts, "g", "1000")
    proc = native.run(
        "ctx", 0, "alloc", 600, how, 300, "info", how, 500, "alloc", 400, "info",
        KUBEACC_DEVICE_MEMORY_LIMIT="1000", **env,
    )  # fmt: skip
    rows = results(proc)
    assert rows[1:] == [
        ["alloc", "0"],
        [how, "0"],
        ["info", "0", "400", "1000"],  # the child's 300 went with it, the parent's 600 stay
        [how, str(OOM)],
        ["alloc", "0"],
        ["info", "0", "0", "1000"],
    ], proc.stdout


def test_a_process_whose_exit_blocks_keeps_its_share_until_it_is_gone(
    native: Native, accounts: AccountService
) -> None:
    """exit() runs the destructors, then blocks flushing stdout into a full pipe while the
    process still holds its memory: the share comes back only when the process is gone."""
    env = account(native, accounts, "claim-3")
    first = subprocess.Popen(
        [str(native.probe), "ctx", "0", "alloc", "1000", "blockexit", "512"],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
    )
    assert first.stderr is not None and first.stdout is not None
    try:
        assert first.stderr.readline() == b"exiting\n"
        time.sleep(0.5)  # into exit(): destructors run, then the flush blocks
        assert first.poll() is None
        second = native.run("ctx", 0, "alloc", 1000, **env)
        assert codes(second) == [0, OOM], second.stdout
        first.stdout.read()
        assert first.wait(10) == 0
    finally:
        first.kill()
    assert codes(native.run("ctx", 0, "alloc", 1000, **env)) == [0, 0]


def test_dlvsym_does_not_reach_the_c_librarys_own_dlsym(native: Native) -> None:
    proc = native.run(
        "ctx", 0, "alloc", 1000, "dlvsym", 1000, "held", 0, KUBEACC_DEVICE_MEMORY_LIMIT="1024"
    )
    assert codes(proc) == [0, 0, OOM, 1000], proc.stdout


def test_a_second_copy_of_the_driver_in_a_new_namespace_gets_nothing(native: Native) -> None:
    """dlmopen(LM_ID_NEWLM, "libcuda.so.1"): a copy the preloaded library is not in."""
    proc = native.run("ctx", 0, "alloc", 1000, "dlmopen", 1000, KUBEACC_DEVICE_MEMORY_LIMIT="1024")
    assert codes(proc)[:2] == [0, 0], proc.stdout
    assert codes(proc)[2] != 0, proc.stdout  # refused: no memory from the other copy
    assert "dlmopen of libcuda.so.1 into another link-map namespace refused" in proc.stderr
    # Without a share the program runs as it would.
    assert codes(native.run("ctx", 0, "alloc", 1000, "dlmopen", 1000, preload=False)) == [0, 0, 0]


def test_a_second_copy_of_the_driver_by_path_is_held_to_the_share(
    native: Native, tmp_path: Path
) -> None:
    copy = tmp_path / "copy" / "libcuda.so.1"
    copy.parent.mkdir()
    shutil.copy(native.dir / "libcuda.so.1", copy)
    proc = native.run(
        "ctx", 0, "alloc", 1000, "dlcopy", copy, 1000, KUBEACC_DEVICE_MEMORY_LIMIT="1024"
    )
    assert codes(proc)[:2] == [0, 0], proc.stdout
    assert codes(proc)[2] != 0, proc.stdout


def test_a_killed_process_of_another_pid_namespace_gives_its_share_back(
    native: Native, accounts: AccountService
) -> None:
    """Containers of one pod that share a claim share its account from their own PID
    namespaces: a pid says nothing there, the slot's lock does."""
    if (
        not shutil.which("unshare")
        or subprocess.run(["unshare", "--pid", "--fork", "true"], check=False).returncode != 0
    ):
        pytest.skip("unshare --pid is not permitted here")
    env = account(native, accounts, "claim-4")
    victim = subprocess.Popen(
        [
            "unshare",
            "--pid",
            "--fork",
            "--kill-child",
            native.probe,
            "ctx",
            "0",
            "alloc",
            "900",
            "pause",
        ],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert victim.stdout is not None
    try:
        assert victim.stdout.readline().split() == ["ctx", "0"]
        assert victim.stdout.readline().split() == ["alloc", "0"]
        assert codes(native.run("ctx", 0, "alloc", 200, **env)) == [0, OOM]
        victim.send_signal(signal.SIGKILL)  # its child, the probe, gets SIGKILL too
        victim.wait(10)
    finally:
        victim.kill()
    deadline = time.monotonic() + 10
    while codes(native.run("ctx", 0, "alloc", 1000, **env)) != [0, 0]:
        assert time.monotonic() < deadline, "the killed process's 900 MiB never came back"
        time.sleep(0.1)
