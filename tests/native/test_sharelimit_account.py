"""The container's account in the agent's accounting service, against what a hostile process of
the container can do (issue 44: rewriting the account, removing it) and the agent's restart.

Before the service the account was a file in /dev/shm that any process of the container could
zero or remove (+1024 MiB each); these tests fail with that library (KUBEACC_TEST_SHARELIMIT):
it ignores ``KUBEACC_SHARELIMIT_SOCKET`` and keeps one account per process."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from kubeacc.node.shareaccount import (
    ADOPT,
    HELD_NAME,
    HELLO,
    QUERY,
    RELEASE,
    REPLY,
    REQUEST,
    RESERVE,
    SOCKET_NAME,
    AccountService,
)
from tests.native.conftest import Native
from tests.native.test_sharelimit import OOM, codes

GIB = 1 << 30


def holder(native: Native, env: dict[str, str], mib: int) -> subprocess.Popen[str]:
    """A process of the container that holds ``mib`` and waits (then reports, and exits)."""
    proc = subprocess.Popen(
        [str(native.probe), "ctx", "0", "alloc", str(mib), "pause", "info"],
        env=native.env(**env),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None
    assert [proc.stdout.readline().split() for _ in range(3)] == [
        ["ctx", "0"],
        ["alloc", "0"],
        ["pause"],
    ]
    return proc


def resume(proc: subprocess.Popen[str]) -> list[str]:
    """Let a holder go on: its ``info`` line (free, total MiB)."""
    assert proc.stdin is not None and proc.stdout is not None
    proc.stdin.write("\n")
    proc.stdin.flush()
    line = proc.stdout.readline().split()
    assert proc.wait(30) == 0
    return line


def env_of(accounts: AccountService, name: str, **more: str) -> dict[str, str]:
    """The variables of a 1024 MiB share whose account the service keeps."""
    d = accounts.open(name, "1024")
    return {
        "KUBEACC_DEVICE_MEMORY_LIMIT": "1024",
        "KUBEACC_SHARELIMIT_SOCKET": str(d / SOCKET_NAME),
        **more,
    }


def ask(sock: socket.socket, op: int, unit: int, n: int) -> tuple[int, int]:
    sock.sendall(REQUEST.pack(op, unit, n))
    status, used = REPLY.unpack(sock.recv(REPLY.size, socket.MSG_WAITALL))
    return status, used


def test_rewriting_the_account_gives_nothing_beyond_the_share(
    native: Native, accounts: AccountService
) -> None:
    """A hostile process speaks the service's protocol itself: it can return only what its
    own connection holds, so the container's 1024 MiB stay counted."""
    env = env_of(accounts, "hostile-1")
    first = holder(native, env, 1024)
    try:
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(env["KUBEACC_SHARELIMIT_SOCKET"])
            assert ask(sock, HELLO, 0, 0) == (0, 1)
            assert sock.recv(REPLY.size, socket.MSG_WAITALL)[8:] == bytes(8)  # its token
            for op in (RELEASE, RELEASE, ADOPT, RELEASE):
                sock.sendall(REQUEST.pack(op, 0, (1 << 64) - 1 if op == RELEASE else 0))
            assert ask(sock, QUERY, 0, 0) == (0, GIB)
            assert ask(sock, RESERVE, 0, 1) == (1, GIB)
        with socket.socket(socket.AF_UNIX) as sock:  # garbage closes its own connection only
            sock.connect(env["KUBEACC_SHARELIMIT_SOCKET"])
            sock.sendall(b"\xff" * 64)
            assert sock.recv(16) == b""
        # The account's files are the agent's: rewriting them changes nothing it serves.
        d = Path(env["KUBEACC_SHARELIMIT_SOCKET"]).parent
        (d / "held.json").write_text('{"records": []}')
        (d / "limits").write_text("999999\n")
        assert codes(native.run("ctx", 0, "alloc", 1024, "held", 0, **env)) == [0, OOM, 0]
        assert resume(first) == ["info", "0", "0", "1024"]
    finally:
        first.kill()
    assert codes(native.run("ctx", 0, "alloc", 1024, **env)) == [0, 0]


def test_removing_the_account_gives_nothing_beyond_the_share(
    native: Native, accounts: AccountService
) -> None:
    """``rm`` of the account (the container sees it read-only; were it writable): a process
    started after finds no account and gets nothing, never a fresh one."""
    env = env_of(accounts, "hostile-2", KUBEACC_SHARELIMIT_WAIT_MS="200")
    first = holder(native, env, 1024)
    try:
        Path(env["KUBEACC_SHARELIMIT_SOCKET"]).unlink()
        proc = native.run("ctx", 0, "alloc", 1024, "alloc", 1, "held", 0, **env)
        assert codes(proc) == [0, OOM, OOM, 0], proc.stdout
        assert "accounting service" in proc.stderr and "is not reachable" in proc.stderr
    finally:
        first.kill()


SERVE = """
import signal, sys
from pathlib import Path
from kubeacc.node.shareaccount import AccountService
AccountService(Path(sys.argv[1])).start()
print("serving", flush=True)
signal.pause()
"""


def serve(root: Path) -> subprocess.Popen[str]:
    """The service in a process of its own (as the agent), to be killed with SIGKILL."""
    proc = subprocess.Popen(
        [sys.executable, "-c", SERVE, str(root)],
        stdout=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
    )
    assert proc.stdout is not None and proc.stdout.readline() == "serving\n"
    return proc


def test_the_agent_killed_keeps_the_account_of_running_processes(
    native: Native, accounts: AccountService
) -> None:
    """kill -9 of the service: a new one serves the share again from what the old one wrote,
    counting each process's part until the process reconnects (and declares it) or is gone."""
    env = env_of(accounts, "restart")
    root = accounts.root
    accounts.stop()  # the share's directory stays: the agent's process below serves it
    agent = serve(root)
    first = holder(native, env, 900)
    try:
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        agent = serve(root)
        # The holder has not spoken since: its 900 MiB count from the record.
        assert codes(native.run("ctx", 0, "alloc", 200, **env)) == [0, OOM]
        # It reconnects at its next call (a query here) and declares what it holds.
        assert resume(first) == ["info", "0", "124", "1024"]
        deadline = time.monotonic() + 10
        while codes(native.run("ctx", 0, "alloc", 1024, **env)) != [0, 0]:
            assert time.monotonic() < deadline, "the holder's 900 MiB never came back"
            time.sleep(0.1)
    finally:
        first.kill()
        agent.kill()
        agent.wait(10)


def test_a_process_gone_while_the_agent_was_down_gives_its_share_back(
    native: Native, accounts: AccountService
) -> None:
    env = env_of(accounts, "gone")
    root = accounts.root
    accounts.stop()
    agent = serve(root)
    first = holder(native, env, 900)
    try:
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        first.kill()
        first.wait(10)
        agent = serve(root)
        assert codes(native.run("ctx", 0, "alloc", 1024, **env)) == [0, 0]
    finally:
        first.kill()
        agent.kill()
        agent.wait(10)


def test_a_process_the_agent_cannot_see_is_known_again_by_its_token(
    native: Native, accounts: AccountService
) -> None:
    """An agent in its own PID namespace (the chart's) sees no pid of the container's
    processes: after its restart a record is matched to its process only by the token the
    process presents when it reconnects, so nothing is counted twice."""
    env = env_of(accounts, "token")
    root = accounts.root
    accounts.stop()
    agent = serve(root)
    first = holder(native, env, 900)
    try:
        agent.send_signal(signal.SIGKILL)
        agent.wait(10)
        held = root / "token" / HELD_NAME
        records = json.loads(held.read_text())
        ((record),) = records["records"]
        assert record["held"] == [900 << 20] and len(record["token"]) == 64
        record["pid"], record["start"] = 0, None  # as such an agent wrote it
        held.write_text(json.dumps(records))
        agent = serve(root)
        assert codes(native.run("ctx", 0, "alloc", 200, **env)) == [0, OOM]
        # Not 0 free (its record and its declaration both counted): the record is dropped.
        assert resume(first) == ["info", "0", "124", "1024"]
        assert codes(native.run("ctx", 0, "alloc", 1024, **env)) == [0, 0]
    finally:
        first.kill()
        agent.kill()
        agent.wait(10)
