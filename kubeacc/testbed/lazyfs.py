"""A FUSE file system that forgets what was never made durable: a real power cut for the files
of a test's daemons (docs/testing.md, "Fault runner", ``power-loss``).

``python -m kubeacc.testbed.lazyfs BACKING MOUNTPOINT`` mounts ``BACKING`` at ``MOUNTPOINT``.
Every operation passes through to the backing directory, so that while mounted the backing
directory and every read through the mount show what a process sees after its writes (the page
cache). Beside it the file system keeps in memory what a disk would hold after a power cut:

- a file's durable bytes: what it held at the mount or at its last ``fsync``/``fdatasync``
  (a file made after the mount and never flushed has none: it comes back empty);
- a directory's durable entries: its names and the files they named at the mount or at its
  last ``fsync``. Creates, renames, unlinks, links and mkdirs are not durable until then: the
  conservative model (POSIX's), which drops more than ext4 would. ext4 with ``data=ordered``
  also commits a new file's name with an ``fsync`` of the file and flushes a file renamed over
  an existing one (``auto_da_alloc``); neither is modelled, so a program that relies on them
  loses its write here.

Creating the file :data:`CUT_NAME` at the mount's root is the power cut: from that request on
every operation fails with EIO, the backing directory is replaced by exactly the durable state
(the durable entries reachable from the root, each file with its durable bytes), and the create
is answered ESHUTDOWN. Then the mount is unmounted (lazily: :meth:`LazyMount.power_cut`). Not
modelled: torn writes (a flushed file keeps every byte of its last flush, an unflushed one none
of its new ones: never a part of a write, never a block read back as NUL), metadata changes
(modes, times) and extended attributes, which pass through and are kept.

Requests are served one at a time (libfuse's single-threaded loop), so the cut falls between
two operations, never inside one.
"""

from __future__ import annotations

import errno
import logging
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

#: The name whose creation at the mount's root cuts the power.
CUT_NAME = ".lazyfs-power-cut"
_STAT_KEYS = (
    "st_mode",
    "st_ino",
    "st_nlink",
    "st_uid",
    "st_gid",
    "st_size",
    "st_blocks",
    "st_rdev",
)


_UTIME_NOW, _UTIME_OMIT = (1 << 30) - 1, (1 << 30) - 2
_STATVFS_KEYS = (
    "f_bavail",
    "f_bfree",
    "f_blocks",
    "f_bsize",
    "f_favail",
    "f_ffree",
    "f_files",
    "f_flag",
    "f_frsize",
    "f_namemax",
)


class Inode:
    """One file, directory or special file of the model."""

    __slots__ = ("durable", "durable_entries", "entries", "mode", "rdev", "target")

    def __init__(self, mode: int, *, durable: bytes = b"", target: str = "", rdev: int = 0):
        self.mode = mode
        #: a regular file's bytes as of its last flush
        self.durable = durable
        #: a directory's entries now, and as of its last flush
        self.entries: dict[str, Inode] = {}
        self.durable_entries: dict[str, Inode] = {}
        #: a symbolic link's target, a device's number
        self.target = target
        self.rdev = rdev


def scan(path: Path) -> Inode:
    """The model of what ``path`` holds now, all of it durable (a mount starts after a boot)."""
    st = path.lstat()
    if stat.S_ISDIR(st.st_mode):
        node = Inode(st.st_mode)
        for child in sorted(path.iterdir()):
            node.entries[child.name] = scan(child)
        node.durable_entries = dict(node.entries)
        return node
    if stat.S_ISREG(st.st_mode):
        return Inode(st.st_mode, durable=path.read_bytes())
    if stat.S_ISLNK(st.st_mode):
        return Inode(st.st_mode, target=os.readlink(path))
    return Inode(st.st_mode, rdev=st.st_rdev)


def write_durable(root: Inode, dest: Path) -> None:
    """Write the durable state of ``root``'s tree at ``dest`` (which must not exist)."""
    written: dict[int, Path] = {}

    def put(node: Inode, path: Path) -> None:
        if id(node) in written and not stat.S_ISDIR(node.mode):
            os.link(written[id(node)], path)  # a hard link of a file written already
            return
        written[id(node)] = path
        kind = stat.S_IFMT(node.mode)
        perm = stat.S_IMODE(node.mode)
        if kind == stat.S_IFDIR:
            path.mkdir()
            for name, child in node.durable_entries.items():
                if id(child) in written and stat.S_ISDIR(child.mode):
                    continue  # a directory reachable twice (renamed, not flushed): kept once
                put(child, path / name)
            os.chmod(path, perm)
        elif kind == stat.S_IFREG:
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, perm)
            try:
                os.write(fd, node.durable)
            finally:
                os.close(fd)
        elif kind == stat.S_IFLNK:
            os.symlink(node.target, path)
        else:
            os.mknod(path, node.mode, node.rdev)

    put(root, dest)


def _fs_class() -> type:
    """The FUSE operations class (mfusepy loaded only where the file system runs)."""
    import mfusepy  # type: ignore[import-untyped]

    class LazyFS(mfusepy.Operations):  # type: ignore[misc]
        use_ns = True

        def __init__(self, backing: Path) -> None:
            self.backing = backing
            self.root = scan(backing)
            #: open file handle (a backing fd) -> the file it opened
            self.files: dict[int, Inode] = {}
            self.cut = False

        # -- the model ------------------------------------------------------------------
        def _real(self, path: str) -> str:
            return str(self.backing) + path

        def _live(self) -> None:
            if self.cut:
                raise mfusepy.FuseOSError(errno.EIO)

        def _lookup(self, path: str) -> Inode:
            node = self.root
            for part in path.strip("/").split("/"):
                if part:
                    node = node.entries[part]
            return node

        def _parent(self, path: str) -> tuple[Inode, str]:
            head, _, name = path.rstrip("/").rpartition("/")
            return self._lookup(head or "/"), name

        def _add(self, path: str, node: Inode) -> None:
            parent, name = self._parent(path)
            parent.entries[name] = node

        def undurable(self) -> tuple[int, int]:
            """(directory entries, files) whose state now differs from their durable one."""
            names = datas = 0
            seen: set[int] = set()
            stack = [(self.root, self.backing)]
            while stack:
                node, path = stack.pop()
                if id(node) in seen:
                    continue
                seen.add(id(node))
                if stat.S_ISDIR(node.mode):
                    names += len(set(node.entries.items()) ^ set(node.durable_entries.items()))
                    stack += [(child, path / name) for name, child in node.entries.items()]
                elif stat.S_ISREG(node.mode) and path.read_bytes() != node.durable:
                    datas += 1
            return names, datas

        def power_cut(self) -> None:
            self.cut = True
            for fd in list(self.files):
                os.close(fd)
            self.files.clear()
            fresh = self.backing.with_name(self.backing.name + ".cut")
            old = self.backing.with_name(self.backing.name + ".lost")
            for leftover in (fresh, old):
                shutil.rmtree(leftover, ignore_errors=True)
            write_durable(self.root, fresh)
            self.backing.rename(old)
            fresh.rename(self.backing)
            shutil.rmtree(old)

        # -- reads ----------------------------------------------------------------------
        def getattr(self, path: str | None, fh: int | None = None) -> dict[str, Any]:
            self._live()
            if path is not None and path.lstrip("/") == CUT_NAME:
                raise mfusepy.FuseOSError(errno.ENOENT)
            if path is None and fh is not None:
                st = os.fstat(fh)
            else:
                st = os.lstat(self._real(path or "/"))
            out: dict[str, Any] = {k: getattr(st, k) for k in _STAT_KEYS}
            out.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns)
            return out

        def readdir(self, path: str, fh: int) -> list[str]:
            self._live()
            return [".", "..", *os.listdir(self._real(path))]

        def readlink(self, path: str) -> str:
            self._live()
            return os.readlink(self._real(path))

        def access(self, path: str, amode: int) -> int:
            self._live()
            if not os.access(self._real(path), amode):
                raise mfusepy.FuseOSError(errno.EACCES)
            return 0

        def statfs(self, path: str) -> dict[str, int]:
            self._live()
            sv = os.statvfs(self._real(path))
            return {k: getattr(sv, k) for k in _STATVFS_KEYS}

        def read(self, path: str | None, size: int, offset: int, fh: int) -> bytes:
            self._live()
            return os.pread(fh, size, offset)

        # -- files ----------------------------------------------------------------------
        def open(self, path: str, flags: int) -> int:
            self._live()
            node = self._lookup(path)
            # read-write for the flush's read-back; the caller's own mode is the kernel's to check
            fd = os.open(self._real(path), (flags & ~os.O_ACCMODE) | os.O_RDWR)
            self.files[fd] = node
            return fd

        def create(self, path: str, mode: int, flags: int) -> int:
            self._live()
            if path.lstrip("/") == CUT_NAME:
                try:
                    names, datas = self.undurable()
                    self.power_cut()
                except Exception:
                    logging.exception("lazyfs: the power cut failed")
                    raise mfusepy.FuseOSError(errno.EIO) from None
                logging.info(
                    "lazyfs: power cut: %d directory entries and %d files' bytes not durable "
                    "dropped; %s holds the durable state",
                    names,
                    datas,
                    self.backing,
                )
                raise mfusepy.FuseOSError(errno.ESHUTDOWN)
            fd = os.open(self._real(path), (flags & ~os.O_ACCMODE) | os.O_RDWR | os.O_CREAT, mode)
            node = Inode(os.fstat(fd).st_mode)
            self._add(path, node)
            self.files[fd] = node
            return fd

        def write(self, path: str | None, data: bytes, offset: int, fh: int) -> int:
            self._live()
            return os.pwrite(fh, data, offset)

        def truncate(self, path: str | None, length: int, fh: int | None = None) -> int:
            self._live()
            if fh is not None:
                os.ftruncate(fh, length)
            elif path is not None:
                os.truncate(self._real(path), length)
            else:
                raise mfusepy.FuseOSError(errno.EBADF)
            return 0

        def flush(self, path: str | None, fh: int) -> int:
            self._live()
            return 0

        def release(self, path: str | None, fh: int) -> int:
            if fh in self.files:
                del self.files[fh]
                os.close(fh)
            return 0

        def fsync(self, path: str | None, datasync: int, fh: int) -> int:
            self._live()
            node = self.files[fh]
            node.durable = os.pread(fh, os.fstat(fh).st_size, 0)
            return 0

        def fsyncdir(self, path: str | None, datasync: int, fh: int) -> int:
            self._live()
            if path is None:
                raise mfusepy.FuseOSError(errno.EBADF)
            node = self._lookup(path)
            node.durable_entries = dict(node.entries)
            return 0

        # -- names ----------------------------------------------------------------------
        def mkdir(self, path: str, mode: int) -> int:
            self._live()
            os.mkdir(self._real(path), mode)
            self._add(path, Inode(os.lstat(self._real(path)).st_mode))
            return 0

        def mknod(self, path: str, mode: int, dev: int) -> int:
            self._live()
            os.mknod(self._real(path), mode, dev)
            self._add(path, Inode(os.lstat(self._real(path)).st_mode, rdev=dev))
            return 0

        def symlink(self, target: str, source: str) -> int:
            # mfusepy: ``target`` is the new link's path, ``source`` what it points to
            self._live()
            os.symlink(source, self._real(target))
            self._add(target, Inode(stat.S_IFLNK | 0o777, target=source))
            return 0

        def link(self, target: str, source: str) -> int:
            # mfusepy: ``target`` is the new name, ``source`` the existing file
            self._live()
            os.link(self._real(source), self._real(target))
            self._add(target, self._lookup(source))
            return 0

        def unlink(self, path: str) -> int:
            self._live()
            os.unlink(self._real(path))
            parent, name = self._parent(path)
            del parent.entries[name]
            return 0

        def rmdir(self, path: str) -> int:
            self._live()
            os.rmdir(self._real(path))
            parent, name = self._parent(path)
            del parent.entries[name]
            return 0

        def rename(self, old: str, new: str) -> int:
            self._live()
            os.rename(self._real(old), self._real(new))
            src, name = self._parent(old)
            node = src.entries.pop(name)
            self._add(new, node)
            return 0

        def chmod(self, path: str | None, mode: int) -> int:
            self._live()
            if path is None:
                raise mfusepy.FuseOSError(errno.EBADF)
            os.chmod(self._real(path), mode)
            self._lookup(path).mode = os.lstat(self._real(path)).st_mode
            return 0

        def chown(self, path: str | None, uid: int, gid: int) -> int:
            self._live()
            if path is None:
                raise mfusepy.FuseOSError(errno.EBADF)
            os.lchown(self._real(path), uid, gid)
            return 0

        def utimens(self, path: str | None, times: tuple[int, int] | None = None) -> int:
            self._live()
            if path is None:
                raise mfusepy.FuseOSError(errno.EBADF)
            real = self._real(path)
            st = os.lstat(real)
            now = time.time_ns()
            atime, mtime = times or (_UTIME_NOW, _UTIME_NOW)

            def resolve(value: int, current: int) -> int:
                # libfuse hands UTIME_NOW / UTIME_OMIT through as nanoseconds of second 0
                return now if value == _UTIME_NOW else current if value == _UTIME_OMIT else value

            ns = (resolve(atime, st.st_atime_ns), resolve(mtime, st.st_mtime_ns))
            os.utime(real, ns=ns, follow_symlinks=False)
            return 0

    return LazyFS


def serve(backing: Path, mountpoint: Path) -> None:
    """Mount ``backing`` at ``mountpoint`` and serve until unmounted (foreground)."""
    import mfusepy

    ops = _fs_class()(backing)
    mfusepy.FUSE(
        ops,
        str(mountpoint),
        foreground=True,
        nothreads=True,
        # an unlinked file that is still open goes at once (no hidden rename in the model)
        hard_remove=True,
        default_permissions=True,
        fsname="lazyfs",
    )


class LazyMount:
    """The file system of ``backing`` mounted at ``mountpoint`` by a daemon of its own."""

    def __init__(self, backing: Path, mountpoint: Path, log: Path | None = None) -> None:
        self.backing = backing
        self.mountpoint = mountpoint
        self.log = log or backing.with_name(backing.name + ".lazyfs.log")
        self.proc: subprocess.Popen[bytes] | None = None

    def mount(self, timeout: float = 30.0) -> None:
        if self.mounted():
            raise RuntimeError(f"{self.mountpoint} is mounted already")
        self.backing.mkdir(parents=True, exist_ok=True)
        self.mountpoint.mkdir(parents=True, exist_ok=True)
        # this file run as a script (it imports only the standard library and mfusepy), so that
        # the daemon does not depend on the caller's working directory or installed tree
        argv = [sys.executable, str(Path(__file__).resolve()), str(self.backing)]
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen(
                [*argv, str(self.mountpoint)], stdout=log, stderr=subprocess.STDOUT
            )
        deadline = time.monotonic() + timeout
        while not self.mounted():
            if self.proc.poll() is not None or time.monotonic() > deadline:
                self._stop_daemon()
                raise RuntimeError(f"lazyfs did not mount {self.mountpoint}: {self._tail()}")
            time.sleep(0.02)

    def mounted(self) -> bool:
        """Listed in the mount table (a stat of a cut mount fails, so ismount would say no)."""
        where = str(self.mountpoint.absolute())
        with open("/proc/self/mounts", encoding="utf-8") as table:
            # the table escapes spaces and the like as octal: decode before comparing
            return any(line.split()[1].encode().decode("unicode_escape") == where for line in table)

    def power_cut(self) -> None:
        """Drop everything not durable, then unmount: the backing directory holds the state a
        disk would after a power cut at this instant."""
        try:
            os.close(os.open(self.mountpoint / CUT_NAME, os.O_WRONLY | os.O_CREAT, 0o600))
        except OSError as exc:
            if exc.errno != errno.ESHUTDOWN:
                self.unmount()
                raise RuntimeError(f"lazyfs power cut failed ({exc}): {self._tail()}") from exc
        else:
            self.unmount()
            raise RuntimeError(f"lazyfs at {self.mountpoint} did not cut the power")
        self.unmount()

    def unmount(self) -> None:
        """Unmount (lazily: open files of killed processes may linger); without a cut before,
        every write is kept, as after a clean shutdown."""
        if self.mounted():
            subprocess.run(["fusermount3", "-u", "-z", str(self.mountpoint)], check=False)
        self._stop_daemon()

    def _stop_daemon(self) -> None:
        if self.proc is None:
            return
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait()
        self.proc = None

    def _tail(self) -> str:
        return self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print("usage: python -m kubeacc.testbed.lazyfs BACKING MOUNTPOINT", file=sys.stderr)
        return 2
    backing, mountpoint = Path(argv[0]), Path(argv[1])
    if not backing.is_dir():
        print(f"lazyfs: {backing} is not a directory", file=sys.stderr)
        return 2
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    serve(backing, mountpoint)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
