"""``kubeacc plan`` on hostile files: one line each, quickly, never a traceback or a hang."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from tests.cli.clirun import assert_one_line_error, kubeacc

BOMB = """\
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
h: &h [*g,*g,*g,*g,*g,*g,*g,*g,*g]
i: &i [*h,*h,*h,*h,*h,*h,*h,*h,*h]
"""


@pytest.mark.parametrize(
    ("name", "content", "needle"),
    [
        ("bomb.yaml", BOMB.encode(), "expands to more than"),
        ("deep.yaml", b"[" * 5000 + b"]" * 5000, "nested deeper than 64"),
        ("deep2.yaml", b"a:\n" + b"".join(b" " * i + b"a:\n" for i in range(1, 80)), "nested"),
        ("self.yaml", b"&a [*a]", "nested deeper"),
        ("binary.yaml", bytes(range(256)) * 4, "not UTF-8"),
        ("ctrl.yaml", b"kind: \x07bell\n", "not valid YAML"),
        ("broken.json", b'{"kind": ', "not valid YAML"),
    ],
)
def test_hostile_files(tmp_path: Path, name: str, content: bytes, needle: str) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / name).write_bytes(content)
    start = time.monotonic()
    result = kubeacc("plan", str(folder), home=tmp_path, timeout=60)
    assert_one_line_error(result, 2, name, needle)
    assert time.monotonic() - start < 30


def test_a_fifo_and_dev_zero_are_refused_without_reading(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    os.mkfifo(folder / "pipe.yaml")  # nobody ever writes: reading it would hang
    result = kubeacc("plan", str(folder), home=tmp_path, timeout=60)
    assert_one_line_error(result, 2, "pipe.yaml", "not a regular file (a FIFO)")
    (folder / "pipe.yaml").unlink()
    (folder / "zero.yaml").symlink_to("/dev/zero")
    result = kubeacc("plan", str(folder), home=tmp_path, timeout=60)
    assert_one_line_error(result, 2, "zero.yaml", "not a regular file (a character device)")


def test_an_oversized_file_is_refused(tmp_path: Path) -> None:
    folder = tmp_path / "in"
    folder.mkdir()
    with (folder / "big.yaml").open("wb") as f:
        f.truncate((32 << 20) + 1)  # sparse: no disk used
    result = kubeacc("plan", str(folder), home=tmp_path, timeout=60)
    assert_one_line_error(result, 2, "big.yaml", "larger than")
