"""Reading a host through one root directory.

Every host read in kube-acc goes through :class:`HostRoot`, so a synthetic ``/sys``, ``/dev`` and
``/proc`` tree works exactly like the real one. Paths are host paths (``/sys/bus/pci/devices``);
symlinks are followed as the kernel would inside that root (an absolute link target is taken
relative to the root, never to the machine running discovery). Reads never raise: a failure is
recorded as a warning that names the device and the path, and the caller gets ``None``.

Reads cannot hang: only regular files are read (:func:`read_regular`; a FIFO, socket or device
node where an attribute is expected is a warning, and is never opened in blocking mode), sizes
are bounded, and a whole pass has a deadline after which nothing more is read.
"""

from __future__ import annotations

import errno
import os
import stat
import time
from pathlib import PurePosixPath

import msgspec

from kubeacc.model import DiscoveryWarning

_MAX_LINK_HOPS = 40
#: sysfs attributes are at most a page; /proc files we read are small too.
MAX_READ = 1 << 16
READ_CHUNK = 8192
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC | os.O_NOCTTY
_KINDS = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


#: errno values that say the machine failed a read (out of descriptors or memory, an I/O
#: error, a timeout), not that the host lacks what was read: such a pass is a failed pass,
#: never a host without devices (docs/discovery.md, "Failed passes").
MACHINE_ERRORS = frozenset(
    {
        errno.EMFILE,
        errno.ENFILE,
        errno.EIO,
        errno.ENOMEM,
        errno.ENOBUFS,
        errno.EAGAIN,
        errno.EINTR,
        errno.ETIMEDOUT,
    }
)


class HostReadError(RuntimeError):
    """A discovery pass that could not read the host: its inventory is not the host's."""


class NotRegularFileError(OSError):
    """A FIFO, socket or device node where a file's contents were expected."""


def _check_regular(mode: int, path: str) -> None:
    if stat.S_ISDIR(mode):
        raise IsADirectoryError(errno.EISDIR, "expected a file, found a directory", path)
    if not stat.S_ISREG(mode):
        kind = _KINDS.get(stat.S_IFMT(mode), "a special file")
        raise NotRegularFileError(errno.EINVAL, f"not a regular file ({kind})", path)


def read_regular(path: str, limit: int = MAX_READ) -> bytes:
    """The contents of the regular file ``path``, refused (OSError) past ``limit`` bytes.

    The type is checked before opening (stat) and again on the open descriptor (fstat), and
    the open itself is non-blocking, so a FIFO swapped in between cannot hang the caller.
    """
    _check_regular(os.stat(path).st_mode, path)
    fd = os.open(path, _OPEN_FLAGS)
    try:
        _check_regular(os.fstat(fd).st_mode, path)
        chunks: list[bytes] = []
        size = 0
        while size <= limit:
            # small reads: sysfs attributes are at most a page, and a limit-sized buffer per
            # file (shrunk afterwards) only fragments the long-running agent's heap
            chunk = os.read(fd, min(READ_CHUNK, limit + 1 - size))
            if not chunk:
                break
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise OSError(errno.EFBIG, f"larger than {limit} bytes", path)
    return b"".join(chunks)


class WarningSink(msgspec.Struct):
    """Collects what could not be read, once per (device, path, message)."""

    items: list[DiscoveryWarning] = msgspec.field(default_factory=list)
    #: Reads the machine failed (see MACHINE_ERRORS) and a pass past its deadline.
    failures: list[str] = msgspec.field(default_factory=list)
    _seen: set[tuple[str | None, str, str]] = msgspec.field(default_factory=set)

    def fail(self, path: str, message: str, device: str | None = None) -> None:
        self.add(path, message, device)
        if len(self.failures) < 20:
            self.failures.append(f"{path}: {message}")

    def oserror(self, path: str, message: str, err: OSError, device: str | None = None) -> None:
        """An OSError: a failure of the machine (MACHINE_ERRORS) or a warning about the host."""
        text = f"{message}: {err.strerror or err}"
        if err.errno in MACHINE_ERRORS:
            self.fail(path, text, device)
        else:
            self.add(path, text, device)

    def add(self, path: str, message: str, device: str | None = None) -> None:
        key = (device, path, message)
        if key not in self._seen:
            self._seen.add(key)
            self.items.append(DiscoveryWarning(path=path, message=message, device=device))


class HostRoot:
    """A view of one host's files under ``root`` (``/`` on a real node).

    With a ``deadline`` (seconds from now), reads and listings after it return nothing and
    leave one warning: a pass over a host whose files answer slowly still ends.
    """

    def __init__(
        self,
        root: str | os.PathLike[str] = "/",
        sink: WarningSink | None = None,
        deadline: float | None = None,
    ):
        self.root = os.path.realpath(os.fspath(root))
        self._prefix = "" if self.root == "/" else self.root
        self.sink = sink if sink is not None else WarningSink()
        self.budget = deadline
        self._ends = None if deadline is None else time.monotonic() + deadline

    def expired(self) -> bool:
        """True (and the deadline warning recorded) once the pass is over its deadline."""
        if self._ends is None or time.monotonic() < self._ends:
            return False
        self.sink.fail(
            "discovery",
            f"discovery pass took longer than its {self.budget:g} s deadline; "
            "the rest of the host was not read",
        )
        return True

    # -- paths -------------------------------------------------------------------------------

    def real(self, path: str) -> str:
        """The machine path of host path ``path`` (no symlink resolution)."""
        if self.root == "/":
            return path if path.startswith("/") else "/" + path
        return self._prefix + path if path.startswith("/") else self._prefix + "/" + path

    def host_path(self, real_path: str) -> str:
        """The host path of a machine path under the root."""
        if self.root == "/":
            return real_path
        rel = real_path[len(self.root) :]
        return rel or "/"

    def resolve(self, path: str) -> str | None:
        """Host path with every symlink followed inside the root; None if it dangles or loops."""
        # Fast path: the kernel's own links are relative and stay inside the root.
        real = os.path.realpath(self.real(path))
        if (real == self.root or real.startswith(self._prefix + "/")) and os.path.exists(real):
            return self.host_path(real)
        return self._resolve_jailed(path)

    def _resolve_jailed(self, path: str) -> str | None:
        """Component by component, so absolute and escaping links stay inside the root."""
        parts = [p for p in PurePosixPath(path).parts if p != "/"]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join([*resolved, part])
            real = self.real(candidate)
            if os.path.islink(real):
                hops += 1
                if hops > _MAX_LINK_HOPS:
                    return None
                try:
                    target = os.readlink(real)
                except OSError:
                    return None
                if target.startswith("/"):
                    resolved = []
                parts = [p for p in PurePosixPath(target).parts if p != "/"] + parts
                continue
            if not os.path.lexists(real):
                return None
            resolved.append(part)
        return "/" + "/".join(resolved)

    # -- queries -----------------------------------------------------------------------------

    def exists(self, path: str) -> bool:
        return os.path.exists(self.real(path))

    def is_dir(self, path: str) -> bool:
        return os.path.isdir(self.real(path))

    def listdir(self, path: str, device: str | None = None, required: bool = False) -> list[str]:
        """Sorted entries of a directory; [] (and a warning if ``required``) when unreadable."""
        if self.expired():
            return []
        try:
            return sorted(os.listdir(self.real(path)))
        except FileNotFoundError:
            if required:
                self.sink.add(path, "directory is missing", device)
        except OSError as err:
            self.sink.oserror(path, "cannot list directory", err, device)
        return []

    def readlink_name(self, path: str, device: str | None = None) -> str | None:
        """Last component of a symlink's target (e.g. the driver name behind ``driver``)."""
        real = self.real(path)
        if not os.path.islink(real):
            return None
        try:
            target = os.readlink(real)
        except OSError as err:
            self.sink.oserror(path, "cannot read link", err, device)
            return None
        name = PurePosixPath(target).name
        return name or None

    def read_text(
        self,
        path: str,
        device: str | None = None,
        required: bool = True,
        limit: int = MAX_READ,
    ) -> str | None:
        """File contents, stripped; None and a warning (if ``required``) when unreadable."""
        if self.expired():
            return None
        try:
            data = read_regular(self.real(path), limit)
        except FileNotFoundError:
            if required:
                self.sink.add(path, "file is missing", device)
            return None
        except (IsADirectoryError, NotRegularFileError) as err:
            self.sink.add(path, str(err.strerror), device)
            return None
        except OSError as err:
            self.sink.oserror(path, "cannot read", err, device)
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            self.sink.add(path, "not valid text", device)
            return None
        if "\x00" in text:
            self.sink.add(path, "not valid text", device)
            return None
        return text.strip()

    def read_int(
        self, path: str, device: str | None = None, base: int = 10, required: bool = True
    ) -> int | None:
        text = self.read_text(path, device, required)
        if text is None:
            return None
        try:
            return int(text, base)
        except ValueError:
            self.sink.add(path, f"not an integer: {text[:40]!r}", device)
            return None

    def read_hex(
        self, path: str, device: str | None = None, digits: int = 4, required: bool = True
    ) -> str | None:
        """A sysfs hex id such as ``0x10de``, as ``0x`` + ``digits`` lower-case digits."""
        text = self.read_text(path, device, required)
        if text is None:
            return None
        body = text.lower().removeprefix("0x")
        if not body or len(body) > digits or any(c not in "0123456789abcdef" for c in body):
            self.sink.add(path, f"not a {digits}-digit hex id: {text[:40]!r}", device)
            return None
        return "0x" + body.rjust(digits, "0")
