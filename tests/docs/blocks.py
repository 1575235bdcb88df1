"""The shell blocks of README.md, docs/*.md and examples/**/*.md, each with how a test treats it.

A fenced block labelled ``sh``, ``bash``, ``shell`` or ``console`` is a command an admin types;
the line before its fence (blank lines aside) classifies it with an HTML comment, which
Markdown does not render:

* ``<!-- docs-test: run -->``: tests/docs/test_commands.py runs it as written on the testbed
  that ``python -m kubeacc.testbed up --with-kubeacc`` starts (bash, ``-e -o pipefail``, in a
  scratch directory that links the repository's top-level entries, with that testbed's
  KUBECONFIG and its kubectl and helm on PATH); it must exit 0.
* ``<!-- docs-test: fixture -->``: the command that starts that testbed; the test's fixture
  runs exactly it.
* ``<!-- docs-test: skip reason="..." -->``: not run, and the reason says why (listed as a
  skipped test in every run).

A shell block without a marker, a marker without a block, or a skip without a reason is an
error (tests/docs/test_blocks.py), so a new command cannot land untested without saying why.
In a ``console`` block only the lines that start with ``$ `` are commands; a plain block (no
language) whose first line starts with ``$ `` is one too. Other plain blocks are taken for
listings (trees, output, synopses): a command belongs in a labelled block.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHELL_LANGS = frozenset({"sh", "bash", "shell", "console"})
KINDS = ("run", "fixture", "skip")
_FENCE = re.compile(r"^(\s*)(`{3,}|~{3,})\s*([\w+-]*)")
_MARKER = re.compile(r"^\s*<!--\s*docs-test:\s*(\S+)(.*?)-->\s*$")
_REASON = re.compile(r'^\s*reason="([^"]*)"\s*$')


class BlockError(ValueError):
    """A shell block or marker that does not follow the rules above; names file and line."""


@dataclass(frozen=True)
class Block:
    path: Path
    #: 1-based line of the opening fence.
    line: int
    lang: str
    text: str
    kind: str
    reason: str = ""

    @property
    def where(self) -> str:
        rel = self.path.relative_to(ROOT) if self.path.is_relative_to(ROOT) else self.path
        return f"{rel}:{self.line}"

    def script(self) -> str:
        """What a shell runs: the block, or a console block's ``$`` lines without the prompt."""
        if self.lang != "console":
            return self.text
        return "\n".join(ln[2:] for ln in self.text.splitlines() if ln.startswith("$ "))


def doc_files(root: Path = ROOT) -> list[Path]:
    return [
        root / "README.md",
        *sorted((root / "docs").glob("*.md")),
        *sorted((root / "examples").rglob("*.md")),
    ]


def parse(path: Path) -> list[Block]:
    """The shell blocks of one Markdown file, classified; BlockError on a rule broken."""
    lines = path.read_text().splitlines()
    where = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path
    found: list[Block] = []
    pending: tuple[int, str, str] | None = None  # the last marker: line, kind, rest
    i = 0
    while i < len(lines):
        line = lines[i]
        marker = _MARKER.match(line)
        fence = _FENCE.match(line)
        if marker:
            if pending is not None:
                raise BlockError(f"{where}:{pending[0]}: docs-test marker without a shell block")
            pending = (i + 1, marker.group(1), marker.group(2))
        elif fence:
            close = re.compile(rf"^\s*{re.escape(fence.group(2)[0])}{{{len(fence.group(2))},}}\s*$")
            body: list[str] = []
            start = i
            i += 1
            while i < len(lines) and not close.match(lines[i]):
                body.append(lines[i])
                i += 1
            lang = fence.group(3).lower()
            if not lang and next((ln for ln in body if ln.strip()), "").startswith("$ "):
                lang = "console"  # a plain block of prompts and their output
            if lang in SHELL_LANGS:
                found.append(_classify(path, where, start + 1, lang, body, pending))
            elif pending is not None:
                raise BlockError(
                    f"{where}:{pending[0]}: docs-test marker before a {lang or 'plain'} block"
                )
            pending = None
        elif line.strip() and pending is not None:
            raise BlockError(f"{where}:{pending[0]}: docs-test marker not right before a block")
        i += 1
    if pending is not None:
        raise BlockError(f"{where}:{pending[0]}: docs-test marker without a shell block")
    return found


def _classify(
    path: Path,
    where: Path,
    line: int,
    lang: str,
    body: list[str],
    marker: tuple[int, str, str] | None,
) -> Block:
    if marker is None:
        raise BlockError(
            f"{where}:{line}: {lang} block without a docs-test marker: put "
            '<!-- docs-test: run --> or <!-- docs-test: skip reason="why" --> before it'
        )
    _, kind, rest = marker
    if kind not in KINDS:
        raise BlockError(f"{where}:{line}: docs-test kind {kind!r}; one of {', '.join(KINDS)}")
    reason = ""
    if kind == "skip":
        got = _REASON.match(rest)
        reason = got.group(1).strip() if got else ""
        if not reason:
            raise BlockError(f'{where}:{line}: a skipped block needs reason="why it is not run"')
    elif rest.strip():
        raise BlockError(f"{where}:{line}: docs-test {kind} takes nothing more: {rest.strip()!r}")
    text = "\n".join(body) + "\n"
    return Block(path, line, lang, text, kind, reason)


def all_blocks(root: Path = ROOT) -> list[Block]:
    """Every shell block of the docs; BlockError naming every file's first broken rule."""
    found: list[Block] = []
    errors: list[str] = []
    for path in doc_files(root):
        try:
            found.extend(parse(path))
        except BlockError as exc:
            errors.append(str(exc))
    if errors:
        raise BlockError("\n".join(errors))
    return found
