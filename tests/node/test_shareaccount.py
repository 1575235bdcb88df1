"""The accounting service's own rules (kubeacc/node/shareaccount.py): names and limits it
accepts, and what it counts after a restart. The protocol against the share-limit library is
tests/native/test_sharelimit_account.py."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

from kubeacc.node.shareaccount import (
    HELD_NAME,
    HELLO,
    QUERY,
    RELEASE,
    REPLY,
    REQUEST,
    RESERVE,
    SOCKET_NAME,
    AccountError,
    AccountService,
    parse_limits,
    process_start,
)


def test_limits_are_mib_per_unit() -> None:
    assert parse_limits("1024,512\n") == [1 << 30, 512 << 20]
    for bad in ("", "0", "-1", "1G", "1,,2", ",".join(["1"] * 17)):
        with pytest.raises(AccountError, match="expected 1-16 positive MiB values"):
            parse_limits(bad)


@pytest.mark.parametrize("name", ["", ".hidden", "a/b", "x" * 129, "sp ace"])
def test_a_bad_name_is_refused_before_anything_is_made(tmp_path: Path, name: str) -> None:
    with pytest.raises(AccountError, match="expected"):
        AccountService(tmp_path / "acc").open(name, "1024")
    assert not (tmp_path / "acc").exists() or not list((tmp_path / "acc").iterdir())


def ask(path: Path, *requests: tuple[int, int, int]) -> list[tuple[int, int]]:
    with socket.socket(socket.AF_UNIX) as sock:
        sock.connect(str(path))
        out = []
        for op, unit, n in requests:
            sock.sendall(REQUEST.pack(op, unit, n))
            out.append(REPLY.unpack(sock.recv(REPLY.size, socket.MSG_WAITALL)))
            if op == HELLO:
                sock.recv(REPLY.size, socket.MSG_WAITALL)  # the token
        return out


def test_a_restarted_service_counts_live_records_and_drops_gone_ones(tmp_path: Path) -> None:
    root = Path(os.path.realpath(tmp_path)) / "acc"
    first = AccountService(root)
    d = first.open("s", "1024")
    first.stop()
    sleeper = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    try:
        live = {"pid": sleeper.pid, "start": process_start(sleeper.pid), "held": [600 << 20]}
        gone = {"pid": 2**22 + 7, "start": 1, "held": [300 << 20]}  # no such pid
        hidden = {"pid": 0, "start": None, "held": [100 << 20], "token": "ab"}
        (d / HELD_NAME).write_text(json.dumps({"records": [live, gone, hidden]}))
        again = AccountService(root)
        again.start()
        try:
            assert again.used("s") == [700 << 20]  # the live one and the one it cannot see
            sock = d / SOCKET_NAME
            assert ask(sock, (HELLO, 1, 0), (RESERVE, 0, 400 << 20)) == [(0, 1), (1, 700 << 20)]
            sleeper.kill()
            sleeper.wait(10)
            assert ask(sock, (HELLO, 1, 0), (QUERY, 0, 0)) == [(0, 1), (0, 100 << 20)]
        finally:
            again.stop()
    finally:
        sleeper.kill()


def test_an_account_in_use_keeps_its_limits(tmp_path: Path) -> None:
    service = AccountService(Path(os.path.realpath(tmp_path)) / "acc")
    service.start()
    try:
        d = service.open("p-x", "1024")
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(d / SOCKET_NAME))
            sock.sendall(REQUEST.pack(HELLO, 1, 0))
            sock.recv(2 * REPLY.size, socket.MSG_WAITALL)
            with pytest.raises(AccountError, match="in use with other limits"):
                service.open("p-x", "2048")
        assert (d / "limits").read_text() == "1024\n"
    finally:
        service.stop()


def _admitted(path: Path, held: list[socket.socket]) -> bool:
    """Connect to a share's socket and say hello: True when the service answers (the
    connection is kept in ``held``), False when it closes the connection (refused)."""
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(path / SOCKET_NAME))
    try:
        sock.sendall(REQUEST.pack(HELLO, 1, 0))
        got = sock.recv(2 * REPLY.size, socket.MSG_WAITALL)
    except (BrokenPipeError, ConnectionResetError):
        got = b""
    if len(got) == 2 * REPLY.size:
        held.append(sock)
        return True
    sock.close()
    return False


def test_connections_are_capped_per_share_and_in_all_with_a_fair_part_kept(
    tmp_path: Path,
) -> None:
    service = AccountService(Path(os.path.realpath(tmp_path)) / "acc", per_share=4, total=6)
    service.start()
    held: list[socket.socket] = []
    try:
        a, b = service.open("c-a", "1024"), service.open("c-b", "1024")
        assert [_admitted(a, held) for _ in range(5)] == [True, True, True, True, False]
        assert [_admitted(b, held) for _ in range(2)] == [True, True]
        # 6 in all: b is below its fair part (6 // 2 = 3), a is not
        assert _admitted(b, held)
        assert not _admitted(b, held)
        assert not _admitted(a, held)
        assert service.refused == 3
        # one of a's processes ends: 6 in all again (4 + 3 - 1), b at its fair part
        held.pop(0).close()
        assert not _admitted(b, held)
        # below the total again: b gets up to its own cap
        held.pop(0).close()
        assert _admitted(b, held)
        assert not _admitted(b, held)  # b holds 4 = per_share
    finally:
        for sock in held:
            sock.close()
        service.stop()


_SERVE_UNDER_PIDS_LIMIT = """
import os, resource, sys, time
from pathlib import Path
from kubeacc.node.shareaccount import AccountService
root = Path(sys.argv[1])
os.setgid(65534)
os.setuid(65534)
# the service's own thread and three connections' threads, as a pod's pids limit would allow
resource.setrlimit(resource.RLIMIT_NPROC, (5, 5))
service = AccountService(root)
service.start()
print(service.open("c-a", "1024"), flush=True)
sys.stdin.read()
print(service.refused, flush=True)
"""


def test_a_thread_the_pids_limit_refuses_refuses_its_connection_only() -> None:
    with tempfile.TemporaryDirectory() as tmp:  # pytest's own is private to root
        os.chmod(tmp, 0o755)
        root = Path(os.path.realpath(tmp)) / "acc"
        root.mkdir()
        os.chown(root, 65534, 65534)
        _serve_under_pids_limit(root)


def _serve_under_pids_limit(root: Path) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", _SERVE_UNDER_PIDS_LIMIT, str(root)],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    held: list[socket.socket] = []
    try:
        assert proc.stdout is not None and proc.stdin is not None
        d = Path(proc.stdout.readline().strip())
        got = [_admitted(d, held) for _ in range(6)]
        assert got[:3] == [True, True, True] and not all(got), got
        # the service goes on: a process that ended gives its thread back to the next one
        for sock in held:
            sock.close()
        held.clear()
        assert _admitted(d, held)
        proc.stdin.close()
        assert int(proc.stdout.readline()) == got.count(False)
    finally:
        for sock in held:
            sock.close()
        proc.kill()
        proc.wait()


@pytest.mark.skipif(os.geteuid() != 0, reason="needs root to mount a small tmpfs")
def test_on_a_full_disk_a_reservation_past_the_record_is_refused_and_a_restart_counts_all(
    tmp_path: Path,
) -> None:
    disk = Path(os.path.realpath(tmp_path)) / "disk"
    disk.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(disk)], check=True)
    try:
        service = AccountService(disk / "acc")
        service.start()
        d = service.open("c-a", "1024")
        mib = 1 << 20
        with socket.socket(socket.AF_UNIX) as sock:
            sock.connect(str(d / SOCKET_NAME))

            def call(op: int, n: int) -> tuple[int, int] | None:
                sock.sendall(REQUEST.pack(op, 0, n))
                if op == RELEASE:
                    return None
                got = REPLY.unpack(sock.recv(REPLY.size, socket.MSG_WAITALL))
                if op == HELLO:
                    sock.recv(REPLY.size, socket.MSG_WAITALL)
                return got

            call(HELLO, 0)
            assert call(RESERVE, 100 * mib) == (0, 100 * mib)
            fill = os.open(disk / "fill", os.O_WRONLY | os.O_CREAT, 0o600)
            with contextlib.suppress(OSError):
                while os.write(fill, b"\0" * 4096):
                    pass
            os.close(fill)
            # past what held.json records: refused, nothing counted
            assert call(RESERVE, 100 * mib) == (1, 100 * mib)
            assert service.used("c-a") == [100 * mib]
            # under the recorded mark: no write needed, granted
            call(RELEASE, 50 * mib)
            assert call(RESERVE, 50 * mib) == (0, 100 * mib)
            (disk / "fill").unlink()
            assert call(RESERVE, 100 * mib) == (0, 200 * mib)
            service.stop()
            # a restarted agent counts what this (live) process holds
            again = AccountService(disk / "acc")
            again.start()
            try:
                assert again.used("c-a") == [200 * mib]
            finally:
                again.stop()
    finally:
        subprocess.run(["umount", "-l", str(disk)], check=False)
