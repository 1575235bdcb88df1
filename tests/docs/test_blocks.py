"""Every shell block of the docs is classified (tests/docs/blocks.py), and those not run say why."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.docs.blocks import ROOT, Block, BlockError, all_blocks, parse

BLOCKS = all_blocks()
SKIPPED = [b for b in BLOCKS if b.kind == "skip"]


def _doc(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "doc.md"
    path.write_text(text)
    return path


def test_every_shell_block_is_classified() -> None:
    # all_blocks raised at import if not; the run and fixture blocks are what test_commands runs
    kinds = {b.kind for b in BLOCKS}
    assert {"run", "fixture"} <= kinds, kinds
    (fixture,) = [b for b in BLOCKS if b.kind == "fixture"]
    assert fixture.script().strip() == "python -m kubeacc.testbed up --with-kubeacc"


@pytest.mark.parametrize("block", SKIPPED, ids=[b.where for b in SKIPPED])
def test_block_not_run(block: Block) -> None:
    """Listed as skipped with the block's own reason, in every run (pytest -ra)."""
    pytest.skip(f"{block.where}: {block.reason}")


def test_unmarked_block_is_refused(tmp_path: Path) -> None:
    path = _doc(tmp_path, "text\n\n```sh\nkubectl get pods\n```\n")
    with pytest.raises(BlockError, match=r"doc.md:3: sh block without a docs-test marker"):
        parse(path)


def test_skip_needs_a_reason(tmp_path: Path) -> None:
    path = _doc(tmp_path, '<!-- docs-test: skip reason="" -->\n```bash\nls\n```\n')
    with pytest.raises(BlockError, match="needs reason"):
        parse(path)


def test_marker_must_precede_a_shell_block(tmp_path: Path) -> None:
    with pytest.raises(BlockError, match="before a yaml block"):
        parse(_doc(tmp_path, "<!-- docs-test: run -->\n```yaml\na: 1\n```\n"))
    with pytest.raises(BlockError, match="not right before a block"):
        parse(_doc(tmp_path, "<!-- docs-test: run -->\nprose\n```sh\nls\n```\n"))
    with pytest.raises(BlockError, match="kind 'maybe'"):
        parse(_doc(tmp_path, "<!-- docs-test: maybe -->\n```sh\nls\n```\n"))


def test_blocks_parsed_with_their_marker(tmp_path: Path) -> None:
    text = (
        "# t\n\n<!-- docs-test: run -->\n\n```console\n$ kubectl get pods\nNAME  READY\n"
        '```\n\n```yaml\nx: 1\n```\n<!-- docs-test: skip reason="needs a GPU" -->\n'
        "````sh\necho ```\n````\n\n```python\nprint()\n```\n"
    )
    run, skip = parse(_doc(tmp_path, text))
    assert (run.line, run.lang, run.kind) == (5, "console", "run")
    assert run.script() == "kubectl get pods"
    assert (skip.line, skip.kind, skip.reason) == (14, "skip", "needs a GPU")
    assert skip.script() == "echo ```\n"


def test_plain_block_of_prompts_is_a_console_block(tmp_path: Path) -> None:
    with pytest.raises(BlockError, match="console block without a docs-test marker"):
        parse(_doc(tmp_path, "```\n$ kubeacc plan\noutput\n```\n"))
    assert parse(_doc(tmp_path, "```\nkubeacc/\n  cli/\n```\n")) == []


def test_the_repository_docs_are_read() -> None:
    files = {b.path.relative_to(ROOT).as_posix() for b in BLOCKS}
    assert {"README.md", "docs/install.md", "examples/README.md"} <= files
