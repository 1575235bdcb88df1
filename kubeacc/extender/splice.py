"""Editing the JSON lists of an encoded answer in place, a few entries at a time.

A kept answer (:mod:`kubeacc.extender.memo`) is mended, not encoded again, when a few nodes'
answers changed: the entries of those nodes are found by their bytes and replaced, taken out
or put in, and the untouched runs of entries between them are copied as they are. The
answers are this extender's own encoding (compact, each name as ``msgspec`` encodes it), so
an entry's bytes are known from its node's name.
"""

from __future__ import annotations

from collections.abc import Iterable

#: A filter answer of node names (``encode_answer`` in server.py) around its three lists:
#: refused nodes and reasons, unresolvable ones, the nodes that fit.
FAILED = b'{"FailedNodes":{'
UNRESOLVABLE = b'},"FailedAndUnresolvableNodes":{'
PASSED = b'},"Error":"","NodeNames":['
END = b'],"Nodes":null}'

#: One edit of a list: (where in the answer, order among edits at the same place, end of the
#: entry it replaces or -1 for an insertion, the new entry or b"" for none).
Edit = tuple[int, int, int, bytes]


def fit_list_is(answer: bytes, names: bytes) -> bool:
    """Whether ``names`` is byte for byte the list of the nodes that fit in filter's
    ``answer`` (as encoded here: ``"Error":""`` can only be the field itself, quotes inside a
    string being escaped)."""
    stop = len(answer) - len(END) + 1
    start = stop - len(names)
    head = PASSED[:-1]
    return (
        start >= len(head)
        and answer.endswith(END)
        and answer[start - len(head) : start] == head
        and answer[start:stop] == names
    )


def string_end(data: bytes, at: int) -> int:
    """Where the JSON string whose opening quote is just before ``at`` ends in ``data`` (past
    its closing quote: the first one not escaped by an odd run of backslashes); -1: never."""
    while True:
        at = data.find(b'"', at)
        if at < 0:
            return -1
        run = at
        while data[run - 1] == 0x5C:  # backslash
            run -= 1
        if (at - run) % 2 == 0:
            return at + 1
        at += 1


def spliced(answer: bytes, start: int, stop: int, edits: Iterable[Edit]) -> bytes:
    """The entries of ``answer[start:stop]`` (a list's or an object's, comma-separated) with
    ``edits`` made, joined by commas again."""
    entries: list[bytes] = []
    pos = start
    for where, _, end, entry in sorted(edits):
        entries.append(answer[pos:where])  # untouched entries, commas around them
        if entry:
            entries.append(entry)
        pos = end if end >= 0 else where
    entries.append(answer[pos:stop])
    kept = (e.removeprefix(b",").removesuffix(b",") for e in entries)
    return b",".join(e for e in kept if e)
