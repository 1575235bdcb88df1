"""Reading YAML/JSON that someone else wrote: bounded in bytes, nesting and alias expansion.

``yaml.safe_load`` builds no arbitrary objects, but it still reads a FIFO or ``/dev/zero``
until memory runs out, recurses into deep nesting until a RecursionError, and builds alias
"bombs" (a few lines whose aliases expand to billions of nodes, which then cost forever to
walk). :func:`load_file` reads regular files only, up to :data:`MAX_BYTES`, composes each
document and checks its depth and its size with aliases expanded before constructing it, and
turns every failure into :class:`InputError`, one line naming the file.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from kubeacc.host.files import read_regular

MAX_BYTES = 32 << 20
#: Deeper than any Kubernetes object (~20 levels).
MAX_DEPTH = 64
#: Nodes of one document with aliases expanded: ~100x a large manifest.
MAX_NODES = 2_000_000


class InputError(ValueError):
    """A file that cannot be used; the message is one line and names the file."""


def load_file(path: Path, limit: int = MAX_BYTES) -> list[Any]:
    """The documents of the YAML (or JSON) file ``path``; :class:`InputError` else."""
    try:
        data = read_regular(str(path), limit)
    except OSError as err:
        raise InputError(f"{path}: {err.strerror or err}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise InputError(f"{path}: not UTF-8 text (byte {err.start})") from None
    return load_text(text, str(path))


def load_text(text: str, source: str = "<input>") -> list[Any]:
    """The documents of ``text``; :class:`InputError` for what is not safe to build."""
    try:
        loader = yaml.SafeLoader(text)
    except yaml.YAMLError as err:
        raise InputError(f"{source}: not valid YAML: {_one_line(err)}") from None
    docs: list[Any] = []
    try:
        while loader.check_node():
            node = loader.get_node()
            if node is None:
                continue
            _check(node, source)
            docs.append(loader.construct_document(node))
    except RecursionError:
        raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels") from None
    except yaml.YAMLError as err:
        raise InputError(f"{source}: not valid YAML: {_one_line(err)}") from None
    finally:
        loader.dispose()
    return docs


def _check(root: yaml.Node, source: str) -> None:
    """Depth and expanded size of one composed document, iteratively (no recursion)."""
    sizes: dict[int, int] = {}
    # post-order walk: (node, depth, children done)
    stack: list[tuple[yaml.Node, int, bool]] = [(root, 1, False)]
    while stack:
        node, depth, done = stack.pop()
        if depth > MAX_DEPTH:
            raise InputError(f"{source}: nested deeper than {MAX_DEPTH} levels")
        if id(node) in sizes:
            continue
        children = _children(node)
        if done or not children:
            size = 1 + sum(sizes.get(id(c), 1) for c in children)
            if size > MAX_NODES:
                raise InputError(
                    f"{source}: expands to more than {MAX_NODES} nodes "
                    "(YAML aliases repeating aliases)"
                )
            sizes[id(node)] = size
            continue
        stack.append((node, depth, True))
        stack.extend((c, depth + 1, False) for c in children if id(c) not in sizes)


def _children(node: yaml.Node) -> list[yaml.Node]:
    if isinstance(node, yaml.SequenceNode):
        return list(node.value)
    if isinstance(node, yaml.MappingNode):
        return [n for pair in node.value for n in pair]
    return []


def _one_line(err: yaml.YAMLError) -> str:
    if isinstance(err, yaml.reader.ReaderError):
        return f"unacceptable character #x{err.character:04x} at position {err.position}"
    if isinstance(err, yaml.MarkedYAMLError) and err.problem:
        mark = err.problem_mark
        where = f" (line {mark.line + 1}, column {mark.column + 1})" if mark else ""
        return f"{err.problem}{where}"
    return " ".join(str(err).split())
