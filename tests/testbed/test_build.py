"""The cached Go build every Go tool of the tests goes through (peers, allocator harness).

These build a one-file module with no dependencies, so they need the go tool but no network.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from kubeacc.testbed.build import BuildError, cached_go_build, source_key

HELLO = 'package main\n\nimport "fmt"\n\nfunc main() { fmt.Println("hello") }\n'


def module(root: Path, source: str) -> Path:
    src = root / "src"
    src.mkdir()
    (src / "go.mod").write_text("module example.com/hello\n\ngo 1.26\n")
    (src / "main.go").write_text(source)
    return src


def leftovers(cache: Path) -> list[str]:
    """Scratch directories a build left beside its target (locks are expected)."""
    return sorted(p.name for p in cache.iterdir() if p.is_dir() and p.name.startswith("."))


def test_builds_once_then_reuses_the_complete_directory(tmp_path: Path) -> None:
    src = module(tmp_path, HELLO)
    target = tmp_path / "cache" / "hello-1"
    calls: list[Path] = []

    def command(out: Path) -> list[str]:
        calls.append(out)
        return ["go", "build", "-o", str(out / "hello"), "."]

    built = cached_go_build(target, what="hello", cwd=src, command=command, outputs=["hello"])
    assert built == target
    assert (target / "hello").is_file()
    assert float((target / "build-seconds").read_text()) >= 0
    assert (target / "build.log").is_file()
    assert leftovers(target.parent) == []
    assert len(calls) == 1 and calls[0] != target

    again = cached_go_build(target, what="hello", cwd=src, command=command, outputs=["hello"])
    assert again == target and len(calls) == 1


def test_a_failed_build_leaves_no_target_and_names_the_compiler_error(tmp_path: Path) -> None:
    src = module(tmp_path, HELLO.replace("fmt.Println", "fmt.Printn"))
    target = tmp_path / "cache" / "hello-1"
    with pytest.raises(BuildError) as err:
        cached_go_build(
            target,
            what="the hello tool",
            cwd=src,
            command=lambda out: ["go", "build", "-o", str(out / "hello"), "."],
            outputs=["hello"],
        )
    assert "go build of the hello tool failed" in str(err.value)
    assert "Printn" in str(err.value)
    assert not target.exists()
    assert leftovers(target.parent) == []


def test_a_build_without_every_output_is_not_complete(tmp_path: Path) -> None:
    src = module(tmp_path, HELLO)
    target = tmp_path / "cache" / "hello-1"
    with pytest.raises(BuildError, match="finished without other"):
        cached_go_build(
            target,
            what="hello",
            cwd=src,
            command=lambda out: ["go", "build", "-o", str(out / "hello"), "."],
            outputs=["hello", "other"],
        )
    assert not target.exists()
    assert leftovers(target.parent) == []


def test_the_key_follows_contents_and_recipe_not_input_order(tmp_path: Path) -> None:
    a, b = tmp_path / "a.go", tmp_path / "b.mod"
    a.write_text("one")
    b.write_text("two")
    key = source_key([a, b], ["go", "build"])
    assert source_key([b, a], ["go", "build"]) == key
    assert source_key([a, b], ["go", "build", "-tags", "x"]) != key
    b.write_text("three")
    assert source_key([a, b], ["go", "build"]) != key
