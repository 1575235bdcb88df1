"""The lazy file system (kubeacc/testbed/lazyfs.py) through real system calls: a program in a
process of its own writes, flushes and renames in the mount; then the power is cut and the
backing directory must hold what a disk would, no more (unflushed data and names gone) and no
less (what was flushed kept)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from kubeacc.testbed import lazyfs
from kubeacc.testbed.lazyfs import CUT_NAME, LazyMount

#: helpers the programs below call: fsync of a file by name, of a directory
PRELUDE = """
import os
def put(name, data, *, sync, append=False):
    flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
    fd = os.open(name, flags, 0o644)
    os.write(fd, data)
    if sync:
        os.fsync(fd)
    os.close(fd)
def sync_dir(name="."):
    fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY)
    os.fsync(fd)
    os.close(fd)
"""


@pytest.fixture
def lazy(tmp_path: Path) -> Iterator[LazyMount]:
    backing = tmp_path / "backing"
    backing.mkdir()
    (backing / "old").write_bytes(b"from before the mount")
    (backing / "sub").mkdir()
    (backing / "sub" / "inner").write_bytes(b"inner")
    m = LazyMount(backing, tmp_path / "mnt")
    m.mount()
    try:
        yield m
    finally:
        m.unmount()


def run(m: LazyMount, program: str) -> str:
    """Run ``program`` in a process of its own, in the mount's root; its output."""
    code = PRELUDE + textwrap.dedent(program)
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=m.mountpoint,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def files(root: Path) -> dict[str, bytes | None]:
    """Every path under ``root``: a file's bytes, None for a directory."""
    return {
        str(p.relative_to(root)): (None if p.is_dir() else p.read_bytes())
        for p in sorted(root.rglob("*"))
    }


BEFORE = {"old": b"from before the mount", "sub": None, "sub/inner": b"inner"}


def test_flushed_bytes_survive_and_the_unflushed_tail_is_gone(lazy: LazyMount) -> None:
    run(
        lazy,
        """
        put("journal", b"line 1\\n", sync=True)
        sync_dir()
        put("journal", b"line 2\\n", sync=True, append=True)
        put("journal", b"line 3, never flushed\\n", sync=False, append=True)
        """,
    )
    # the page cache: every write reads back while mounted
    assert (lazy.mountpoint / "journal").read_bytes() == b"line 1\nline 2\nline 3, never flushed\n"
    lazy.power_cut()
    assert not lazy.mounted()
    assert files(lazy.backing) == {**BEFORE, "journal": b"line 1\nline 2\n"}


def test_unflushed_data_and_unflushed_names_are_gone(lazy: LazyMount) -> None:
    run(
        lazy,
        """
        put("named", b"data never flushed", sync=False)
        sync_dir()  # the name is durable, the data is not: an empty file
        put("unnamed", b"flushed, but its name never was", sync=True)
        os.mkdir("newdir")
        put("newdir/f", b"x", sync=True)
        sync_dir("newdir")  # its parent never flushed: the directory is gone with it
        put("old", b"overwritten in place, never flushed", sync=False)
        """,
    )
    lazy.power_cut()
    assert files(lazy.backing) == {**BEFORE, "named": b""}


def test_a_rename_whose_directory_was_not_flushed_is_undone(lazy: LazyMount) -> None:
    run(
        lazy,
        """
        put("new", b"new contents", sync=True)
        os.rename("new", "old")  # over the file from before the mount
        os.rename("sub/inner", "moved")
        os.unlink("moved")
        """,
    )
    assert (lazy.mountpoint / "old").read_bytes() == b"new contents"
    assert not (lazy.mountpoint / "sub" / "inner").exists()
    lazy.power_cut()
    assert files(lazy.backing) == BEFORE


def test_write_tmp_flush_rename_flush_dir_survives(lazy: LazyMount) -> None:
    run(
        lazy,
        """
        put(".old.tmp", b"the new version", sync=True)
        os.rename(".old.tmp", "old")
        sync_dir()
        os.unlink("sub/inner")
        sync_dir("sub")
        """,
    )
    lazy.power_cut()
    assert files(lazy.backing) == {"old": b"the new version", "sub": None}


def test_a_rename_over_a_file_without_flushing_the_new_data_leaves_it_empty(
    lazy: LazyMount,
) -> None:
    # ext4 (data=ordered, auto_da_alloc) would flush it at the rename; the model is POSIX's
    run(
        lazy,
        """
        put(".old.tmp", b"never flushed", sync=False)
        os.rename(".old.tmp", "old")
        sync_dir()
        """,
    )
    lazy.power_cut()
    assert files(lazy.backing) == {**BEFORE, "old": b""}


def test_links_and_special_files_come_back_as_flushed(lazy: LazyMount) -> None:
    run(
        lazy,
        """
        put("a", b"shared", sync=True)
        os.link("a", "b")
        os.symlink("a", "s")
        os.mkfifo("fifo")
        sync_dir()
        os.link("a", "c")  # never flushed
        """,
    )
    lazy.power_cut()
    back = lazy.backing
    assert sorted(p.name for p in back.iterdir()) == ["a", "b", "fifo", "old", "s", "sub"]
    assert (back / "a").stat().st_ino == (back / "b").stat().st_ino
    assert (back / "b").read_bytes() == b"shared"
    assert (back / "s").readlink() == Path("a")
    assert (back / "fifo").is_fifo()


def test_a_clean_unmount_keeps_every_write(lazy: LazyMount) -> None:
    run(lazy, 'put("unflushed", b"kept", sync=False)')
    lazy.unmount()
    assert files(lazy.backing) == {**BEFORE, "unflushed": b"kept"}


def test_the_cut_file_is_never_listed_and_a_second_mount_starts_from_the_durable_state(
    lazy: LazyMount,
) -> None:
    run(lazy, 'put("f", b"1", sync=True)\nsync_dir()\nput("f", b"2", sync=False)')
    assert CUT_NAME not in run(lazy, "print(os.listdir('.'))")
    lazy.power_cut()
    lazy.mount()
    assert (lazy.mountpoint / "f").read_bytes() == b"1"
    run(lazy, 'put("g", b"3", sync=False)')
    lazy.power_cut()
    assert files(lazy.backing) == {**BEFORE, "f": b"1"}


def test_a_missing_backing_directory_is_refused(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, lazyfs.__file__, str(tmp_path / "no"), str(tmp_path)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "is not a directory" in done.stderr


def test_modes_and_times_pass_through(lazy: LazyMount) -> None:
    run(
        lazy,
        """
        os.chmod("old", 0o600)
        os.utime("old", ns=(10**18, 10**18))
        put("new", b"", sync=False)
        os.utime("new")  # now (UTIME_NOW through libfuse)
        """,
    )
    old, new = lazy.backing / "old", lazy.backing / "new"
    assert (old.stat().st_mode & 0o777, old.stat().st_mtime_ns) == (0o600, 10**18)
    assert new.stat().st_mtime_ns > old.stat().st_mtime_ns
