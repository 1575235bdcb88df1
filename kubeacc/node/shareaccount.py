"""The accounting service of GPU memory shares: each share's account, kept by the agent where
no process of the container can rewrite or remove it.

Every share (a claim, or a device-plugin container) has a directory ``<root>/<name>`` that the
CDI spec mounts read-only into the container at :data:`CONTAINER_DIR`: ``limits`` (MiB per
unit, as ``KUBEACC_DEVICE_MEMORY_LIMIT``), the socket ``account.sock`` the share-limit library
connects to, and ``held.json`` (what the service needs after a restart). Each process of the
container holds its part of the account over its own connection; the part comes back when the
connection closes, which the kernel does when the process is gone.

The protocol is fixed-size little-endian messages: a request is ``op, unit`` (u32 each) and
``bytes`` (u64); RESERVE and QUERY get ``status, used`` (u64 each) back, HELLO that and
``token, 0`` (the connection's token, which the process presents at its next HELLO after a
reconnect), RELEASE and ADOPT nothing. A connection that sends anything else, or does not read
its replies, is closed.

Restart (the agent killed): the connections are gone with the agent, their processes are not.
Each connection's holdings are written to ``held.json`` whenever they rise above what was last
written (so the file never says less than is held), with the process's pid and start time as
the kernel reports them, and a hash of its token (the file is readable in the container: a
token is not). A new service serves every directory it finds and counts each record as held
until its process is gone or reconnects (the library presents its previous token at HELLO and
declares what it holds, ADOPT). A record whose process the agent cannot see (another PID
namespace: an agent without the host's) and that does not reconnect stays until the share is
closed: conservative, never less than is held.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import logging
import os
import selectors
import socket
import struct
import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

from kubeacc.node.atomic import tmp_path, write_atomic

log = logging.getLogger(__name__)

#: Where the container sees its share's directory (mounted read-only).
CONTAINER_DIR = "/run/kubeacc/sharelimit"
SOCKET_NAME = "account.sock"
LIMITS_NAME = "limits"
HELD_NAME = "held.json"
ENV_SOCKET = "KUBEACC_SHARELIMIT_SOCKET"
#: What a container's library connects to.
CONTAINER_SOCKET = f"{CONTAINER_DIR}/{SOCKET_NAME}"

REQUEST = struct.Struct("<IIQ")
REPLY = struct.Struct("<QQ")
HELLO, RESERVE, RELEASE, ADOPT, QUERY = 1, 2, 3, 4, 5
OK, DENIED = 0, 1
#: Connections one share may have open (a process each, a thread of the agent each): more are
#: refused.
MAX_CONNECTIONS = 512
#: Connections of all shares together (each a thread, ~22 KB resident: bench/share_connections.py).
#: Past it a share is let in only below its fair part (this over the number of shares), so that
#: one tenant's many processes cannot take the connections of another's shares; the threads
#: then stay under twice this (~45 MB, inside the chart's 256 MiB for the agent, and under a
#: kubelet's usual pod pids limit of 4,096).
MAX_TOTAL_CONNECTIONS = 1024
_NAME_OK = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789._-")


class AccountError(ValueError):
    """A share that cannot be opened (a bad name or limits)."""


def parse_limits(text: str) -> list[int]:
    """Bytes per unit from ``KUBEACC_DEVICE_MEMORY_LIMIT``'s form (MiB, comma-separated)."""
    try:
        mib = [int(part) for part in text.strip().split(",")]
    except ValueError:
        mib = []
    if not mib or any(m <= 0 for m in mib) or len(mib) > 16:
        raise AccountError(f"limits {text!r}: expected 1-16 positive MiB values, comma-separated")
    return [m << 20 for m in mib]


def process_start(pid: int) -> int | None:
    """The process's start time (clock ticks after boot, /proc/<pid>/stat field 22), or None
    when the agent cannot see it. The socket peer is a real process: this reads the real
    /proc, never a generated host tree."""
    if pid <= 0:
        return None
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    return int(stat[stat.rindex(")") + 2 :].split()[19])


@dataclass
class _Record:
    """Holdings of a process whose connection the service no longer has (after a restart)."""

    pid: int
    start: int | None
    held: list[int]
    #: sha256 of the connection's token (hex): the process's proof when it reconnects.
    token: str = ""

    def gone(self) -> bool:
        return self.pid > 0 and (self.start is None or process_start(self.pid) != self.start)


@dataclass(eq=False)
class _Conn:
    sock: socket.socket
    share: _Share
    pid: int
    start: int | None
    held: list[int]
    written: list[int]
    buf: bytearray = field(default_factory=bytearray)
    token: int = 0


@dataclass(eq=False)
class _Share:
    name: str
    dir: Path
    limits: list[int]
    listener: socket.socket
    used: list[int]
    conns: set[_Conn] = field(default_factory=set)
    orphans: list[_Record] = field(default_factory=list)
    opened: float = field(default_factory=time.monotonic)

    def drop_gone(self) -> None:
        for rec in [r for r in self.orphans if r.gone()]:
            self._drop(rec)

    def _drop(self, rec: _Record) -> None:
        self.orphans.remove(rec)
        for unit, n in enumerate(rec.held[: len(self.used)]):
            self.used[unit] -= n

    def adopt_orphans_of(self, token: int) -> None:
        """A process reconnected with the token its previous connection had: that connection's
        record goes, the process declares what it holds (ADOPT)."""
        digest = _digest(token)
        for rec in [r for r in self.orphans if token and r.token == digest]:
            self._drop(rec)

    def write(self) -> None:
        """``held.json``: every connection's high-water holdings and the orphans."""
        records = [
            {"pid": c.pid, "start": c.start, "held": c.written, "token": _digest(c.token)}
            for c in self.conns
            if any(c.written)
        ] + [
            {"pid": r.pid, "start": r.start, "held": r.held, "token": r.token} for r in self.orphans
        ]
        # not flushed: a power loss takes the processes whose holdings it records too
        write_atomic(self.dir / HELD_NAME, json.dumps({"records": records}).encode(), durable=False)


class AccountService:
    """Serves the accounts of the shares under ``root`` on one thread (:meth:`start`)."""

    def __init__(
        self,
        root: Path,
        *,
        per_share: int = MAX_CONNECTIONS,
        total: int = MAX_TOTAL_CONNECTIONS,
    ) -> None:
        self.root = root
        self._per_share = per_share
        self._total = total
        #: connections refused by the caps (the agent's status and tests)
        self.refused = 0
        self._lock = threading.Lock()
        self._shares: dict[str, _Share] = {}
        self._selector = selectors.DefaultSelector()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._selector.register(self._wake_r, selectors.EVENT_READ, None)
        self._stopping = False
        self._thread: threading.Thread | None = None

    # ---- the agent's side ----

    def start(self) -> None:
        """Serve every share found under the root (left by a previous run), then run."""
        self.root.mkdir(parents=True, exist_ok=True)
        self.root.chmod(0o755)
        for d in sorted(self.root.iterdir()):
            if (d / LIMITS_NAME).is_file():
                try:
                    self._serve(d.name, (d / LIMITS_NAME).read_text(), restore=True)
                except (AccountError, OSError) as exc:
                    log.warning("share account %s not served: %s", d.name, exc)
        self._thread = threading.Thread(target=self._run, name="share-accounts", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop serving (the directories stay: a next run serves them again)."""
        if self._stopping:
            return
        self._stopping = True
        self._wake_w.send(b"x")
        if self._thread is not None:
            self._thread.join(10)
        with self._lock:
            for share in self._shares.values():
                self._close_sockets(share)
            self._shares.clear()
        self._selector.close()
        self._wake_r.close()
        self._wake_w.close()

    def open(self, name: str, limits: str) -> Path:
        """The share's directory, serving its account (created, or kept if open with the same
        limits: a prepare done again; an idle one with other limits is made anew)."""
        if not name or len(name) > 128 or name[0] == "." or not set(name) <= _NAME_OK:
            raise AccountError(f"share account name {name!r}: expected [A-Za-z0-9._-]{{1,128}}")
        parse_limits(limits)
        with self._lock:
            share = self._shares.get(name)
            if share is not None and share.limits == parse_limits(limits):
                return share.dir
            busy = share is not None and (share.conns or share.orphans)
        if busy:
            raise AccountError(f"share account {name} is in use with other limits")
        if share is not None:  # a container of that name before (a pod made again): idle
            self.close(name)
        return self._serve(name, limits, restore=False)

    def close(self, name: str) -> None:
        """Stop serving the share and remove its directory (its container is gone)."""
        with self._lock:
            share = self._shares.pop(name, None)
            if share is not None:
                self._close_sockets(share)
        d = self.root / name
        for path in (d / SOCKET_NAME, d / LIMITS_NAME, d / HELD_NAME, tmp_path(d / HELD_NAME)):
            with contextlib.suppress(FileNotFoundError):
                path.unlink()
        with contextlib.suppress(FileNotFoundError):
            d.rmdir()

    def prune(self, keep: set[str], prefix: str, min_age: float) -> list[str]:
        """Close the shares named ``prefix``* that are not in ``keep``, hold nothing (no
        connection, no record) and were opened ``min_age`` seconds ago or more (a container
        being created may not be listed yet); the names closed. For accounts nothing closes
        (device-plugin containers: no unprepare)."""
        now = time.monotonic()
        with self._lock:
            idle = [
                name
                for name, sh in self._shares.items()
                if name.startswith(prefix)
                and name not in keep
                and not sh.conns
                and not sh.orphans
                and now - sh.opened >= min_age
            ]
        for name in idle:
            self.close(name)
        return idle

    def names(self) -> set[str]:
        with self._lock:
            return set(self._shares)

    def used(self, name: str) -> list[int]:
        """Bytes in use per unit (tests and the agent's status)."""
        with self._lock:
            share = self._shares[name]
            self._reap(share)
            return list(share.used)

    # ---- serving ----

    def _serve(self, name: str, limits: str, restore: bool) -> Path:
        units = parse_limits(limits)
        d = self.root / name
        path = d / SOCKET_NAME
        d.mkdir(mode=0o755, parents=True, exist_ok=True)
        used = [0] * len(units)
        orphans: list[_Record] = []
        if restore:
            orphans = _read_records(d / HELD_NAME, len(units))
        else:
            (d / LIMITS_NAME).write_text(limits.strip() + "\n")
            with contextlib.suppress(FileNotFoundError):
                (d / HELD_NAME).unlink()
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        # Bound through the directory's descriptor: a deep state directory would make the
        # path longer than a socket address holds (the container's path is short).
        dfd = os.open(d, os.O_PATH | os.O_DIRECTORY)
        try:
            listener.bind(f"/proc/self/fd/{dfd}/{SOCKET_NAME}")
        except OSError:
            listener.close()
            raise
        finally:
            os.close(dfd)
        path.chmod(0o666)  # any user of the container may connect
        listener.listen(128)
        listener.setblocking(False)
        share = _Share(name, d, units, listener, used, orphans=orphans)
        for rec in orphans:
            for unit, n in enumerate(rec.held):
                used[unit] += n
        share.drop_gone()
        with self._lock:
            self._shares[name] = share
            self._selector.register(listener, selectors.EVENT_READ, share)
        if restore:
            log.info("share account %s served again: %s bytes held", name, share.used)
        return d

    def _close_sockets(self, share: _Share) -> None:
        for conn in list(share.conns):
            with contextlib.suppress(OSError):  # wakes its thread, which closes it
                conn.sock.shutdown(socket.SHUT_RDWR)
        share.conns.clear()
        self._unregister(share.listener)

    def _unregister(self, sock: socket.socket) -> None:
        with contextlib.suppress(KeyError, ValueError):
            self._selector.unregister(sock)
        sock.close()

    def _run(self) -> None:
        while not self._stopping:
            for key, _ in self._selector.select(1.0):
                with self._lock:
                    if key.data is None:
                        with contextlib.suppress(BlockingIOError):
                            self._wake_r.recv(64)
                    elif isinstance(key.data, _Share):
                        self._accept(key.data)

    def _accept(self, share: _Share) -> None:
        if self._shares.get(share.name) is not share:
            return
        try:
            sock, _ = share.listener.accept()
        except (BlockingIOError, OSError):
            return
        if not self._admits(share):
            self.refused += 1
            sock.close()
            return
        pid = struct.unpack("3i", sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, 12))[0]
        sock.setblocking(True)
        # A process that does not read its answers: the send gives up (and the connection
        # closes) after a second, and only this connection's thread waited.
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDTIMEO, struct.pack("ll", 1, 0))
        zero = [0] * len(share.limits)
        conn = _Conn(sock, share, pid, process_start(pid), list(zero), list(zero))
        try:  # the pod's pids limit reached: this connection is refused, the service goes on
            threading.Thread(target=self._serve_conn, args=(conn,), daemon=True).start()
        except RuntimeError:
            self.refused += 1
            sock.close()
            return
        share.conns.add(conn)

    def _admits(self, share: _Share) -> bool:
        """Under the lock: whether ``share`` may have one more connection. Before a refusal
        the connections whose processes are gone are given back (their threads may not have
        run yet)."""
        if len(share.conns) >= self._per_share:
            self._reap(share)
            if len(share.conns) >= self._per_share:
                return False
        if sum(len(sh.conns) for sh in self._shares.values()) >= self._total:
            for sh in self._shares.values():
                self._reap(sh)
            if sum(len(sh.conns) for sh in self._shares.values()) >= self._total:
                return len(share.conns) < self._total // len(self._shares)
        return True

    def _serve_conn(self, conn: _Conn) -> None:
        """A connection's own thread: a blocked read wakes it directly (no event loop between
        a request and its answer); the state is changed under the service's lock."""
        try:
            while data := conn.sock.recv(65536):
                conn.buf += data
                n = len(conn.buf) // REQUEST.size * REQUEST.size
                out, ok = bytearray(), True
                with self._lock:
                    if conn not in conn.share.conns:
                        break
                    for off in range(0, n, REQUEST.size):
                        got = self._handle(conn, *REQUEST.unpack_from(conn.buf, off))
                        if got is None:
                            ok = False
                            break
                        out += got
                del conn.buf[:n]
                if out:
                    conn.sock.sendall(out)
                if not ok:
                    break
        except OSError:
            pass
        with self._lock:
            self._drop(conn)

    def _handle(self, conn: _Conn, op: int, unit: int, n: int) -> bytes | None:
        """One request: its answer (b"": none), or None to close the connection."""
        share = conn.share
        if op == HELLO:  # n: the token of the process's previous connection (0: none)
            share.adopt_orphans_of(n)
            conn.token = int.from_bytes(os.urandom(8), "little") | 1
            if n:
                _write(share)
            return REPLY.pack(OK, len(share.limits)) + REPLY.pack(conn.token, 0)
        if unit >= len(share.limits):
            return None
        if op == RESERVE:
            if share.used[unit] + n > share.limits[unit]:
                self._reap(share)
            if share.used[unit] + n > share.limits[unit]:
                return REPLY.pack(DENIED, share.used[unit])
            if not self._charge(conn, unit, n, unrecorded_refused=True):
                return REPLY.pack(DENIED, share.used[unit])
            return REPLY.pack(OK, share.used[unit])
        if op == RELEASE:
            n = min(n, conn.held[unit])  # only what this connection holds
            conn.held[unit] -= n
            share.used[unit] -= n
            return b""
        if op == ADOPT:  # what the process holds after a reconnect: counted, even past the limit
            self._charge(conn, unit, n, unrecorded_refused=False)
            return b""
        if op == QUERY:
            self._reap(share)
            return REPLY.pack(OK, share.used[unit])
        return None

    def _charge(self, conn: _Conn, unit: int, n: int, *, unrecorded_refused: bool) -> bool:
        """Count ``n`` more bytes held by ``conn``, and record a new high-water mark in
        ``held.json`` (what a restarted agent counts). Where that record cannot be written (a
        full or failing disk) a reservation is refused and undone, so that a restart never
        counts less than is held; what a process declares it holds is counted anyway, and
        recorded at the next write that succeeds."""
        conn.held[unit] += n
        conn.share.used[unit] += n
        if conn.held[unit] <= conn.written[unit]:
            return True
        before = conn.written[unit]
        conn.written[unit] = conn.held[unit]
        if _write(conn.share):
            return True
        conn.written[unit] = before
        if unrecorded_refused:
            conn.held[unit] -= n
            conn.share.used[unit] -= n
            return False
        return True

    def _reap(self, share: _Share) -> None:
        """Under the lock, before a refusal or an answer of what is in use: give back now what
        processes that are gone held (their connections at end of file: the kernel closed them
        at the exit, which the connections' threads may not have seen yet) and records of
        processes gone."""
        share.drop_gone()
        for conn in list(share.conns):
            try:
                gone = conn.sock.recv(1, socket.MSG_PEEK | socket.MSG_DONTWAIT) == b""
            except BlockingIOError:
                continue
            except OSError:
                gone = True
            if gone:
                share.conns.discard(conn)
                for unit, n in enumerate(conn.held):
                    share.used[unit] -= n
                with contextlib.suppress(OSError):  # its thread closes it
                    conn.sock.shutdown(socket.SHUT_RDWR)
                if any(conn.written):
                    _write(share)

    def _drop(self, conn: _Conn) -> None:
        share = conn.share
        conn.sock.close()
        if self._stopping:  # the agent stops: what was written stays for the next one
            return
        if conn not in share.conns:
            return  # its share was closed, or _reap found it gone
        share.conns.discard(conn)
        for unit, n in enumerate(conn.held):
            share.used[unit] -= n
        if any(conn.written):
            _write(share)


def _digest(token: int) -> str:
    """What ``held.json`` keeps of a token: the container can read the file, not invert this."""
    return hashlib.sha256(token.to_bytes(8, "little")).hexdigest()


def _write(share: _Share) -> bool:
    """Write ``held.json``; False (and a warning) where the disk refuses it."""
    try:
        share.write()
    except OSError as exc:
        log.warning("share account %s: %s not written: %s", share.name, HELD_NAME, exc)
        return False
    return True


def _read_records(path: Path, units: int) -> list[_Record]:
    """The records a previous run left; an unreadable file holds everything it can."""
    try:
        raw = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    except (OSError, ValueError) as exc:
        log.warning("%s unreadable (%s): the share starts empty", path, exc)
        return []
    out = []
    for r in raw.get("records", []) if isinstance(raw, dict) else []:
        held = [int(x) for x in r.get("held", [])][:units]
        held += [0] * (units - len(held))
        out.append(_Record(int(r.get("pid", 0)), r.get("start"), held, str(r.get("token", ""))))
    return out


def share_mount(root: Path, name: str) -> tuple[str, str]:
    """The read-only mount (host, container) of a share's directory."""
    return str(root / name), CONTAINER_DIR


def names_in(root: Path, prefix: str) -> Sequence[str]:
    """The shares under ``root`` whose names start with ``prefix``."""
    if not root.is_dir():
        return []
    return sorted(d.name for d in root.iterdir() if d.name.startswith(prefix))
