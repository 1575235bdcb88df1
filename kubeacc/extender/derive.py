"""Prioritize's kept answer carried over to a list of names a few entries apart.

kube-scheduler asks prioritize with the nodes filter kept. When a bound replica makes its node
fit no more (or a released one makes a node fit again), filter's mended answer
(``Answers.mend_filter``) lists a name less (or more), so the next prioritize comes with a list
no kept answer is of, and at 5,000 nodes computing it anew was most of a churned pod's
prioritize. :func:`derive` edits the answer kept for the previous list instead: the pieces of
the nodes whose answer changed since it was current are taken out (not listed any more), put
in before the piece of the next listed name (newly listed) or replaced where they are.

Only for a list this extender encoded itself, the nodes that fit in one of the kind's kept
filter answers (:func:`~kubeacc.extender.splice.fit_list_is`): compact, each name as
``msgspec`` encodes it, so a node's entry is found by its bytes. The two lists are proven the
same but for those entries, byte for byte, with the entries cut out of both; anything else
(the change log not reaching back, more than ``MEND`` changed, a name found twice or away from
an entry's place, other names differing) gives None and the answer is computed.

Call with ``state.lock`` held.
"""

from __future__ import annotations

import msgspec

from kubeacc.extender.answers import MEND, Answers, Kind
from kubeacc.extender.memo import Kept
from kubeacc.extender.splice import Edit, spliced, string_end

_encode = msgspec.json.encode

#: The first characters a name must not start with: after the closing quote of a string that
#: ends in ``[`` or ``,`` only these may follow, so a name found just after such a delimiter
#: could otherwise be the end of another entry.
_AMBIGUOUS = frozenset(b",] \t\r\n")


def derive(answers: Answers, kind: Kind, kept: Kept, names: bytes) -> bytes | None:
    """Prioritize's answer for ``names`` (a JSON list of node names this extender encoded)
    from ``kept``, its kept answer of other names; None when it cannot be told that way."""
    changed = kind.changed_since(kept.since)
    if changed is None or len(changed) > MEND:
        return None
    old, answer = kept.names, kept.answer
    if not (_is_list(old) and _is_list(names) and _is_list(answer)):
        return None
    cut_old: list[tuple[int, int]] = []
    cut_new: list[tuple[int, int]] = []
    edits: list[Edit] = []
    added: dict[int, tuple[bytes, bytes]] = {}  # where in names -> (entry, piece)
    after = len(names)  # the order of a replacement: after insertions at its place
    for node in changed:
        key = _encode(node)
        was, now = _entry(old, key), _entry(names, key)
        if was is None or now is None or key[1] in _AMBIGUOUS:
            return None
        if was < 0 and now < 0:
            continue
        piece = kind.scored.get(node) or answers.piece(node, 0)
        if was < 0:  # newly listed: put in before the next listed name's piece (below)
            cut_new.append((now - 1, now + len(key)))
            added[now] = (key, piece)
            continue
        if now < 0:  # listed no more: its piece taken out
            cut_old.append((was - 1, was + len(key)))
            piece = b""
        at, end = _piece(answer, key)
        if at < 0:
            return None
        edits.append((at, after, end, piece))
    if not (cut_old or cut_new) or _without(old, cut_old) != _without(names, cut_new):
        return None
    for now, (key, piece) in added.items():
        where = _before_next(answer, names, now + len(key), added)
        if where < 0:
            return None
        edits.append((where, now, -1, piece))
    return b"[" + spliced(answer, 1, len(answer) - 1, edits) + b"]"


def _is_list(data: bytes) -> bool:
    return data[:1] == b"[" and data[-1:] == b"]"


def _entry(listing: bytes, key: bytes) -> int | None:
    """Where ``key`` (an encoded name) is an entry of the compact JSON list ``listing``; -1:
    nowhere; None: found twice, or not between a ``[``/``,`` and a ``,``/``]``."""
    at = listing.find(key)
    if at < 0:
        return -1
    end = at + len(key)
    if listing[at - 1] not in b"[," or listing[end] not in b",]":
        return None
    return None if listing.find(key, at + 1) >= 0 else at


def _piece(answer: bytes, key: bytes) -> tuple[int, int]:
    """Where the piece ``{"Host":<key>,"Score":...}`` starts and ends in prioritize's
    ``answer``; (-1, -1) when it is not there once."""
    head = b'{"Host":' + key + b',"Score":'
    at = answer.find(head)
    if at < 0 or answer.find(head, at + 1) >= 0:
        return -1, -1
    return at, answer.index(b"}", at) + 1


def _without(listing: bytes, cuts: list[tuple[int, int]]) -> bytes:
    """``listing`` without the entries at ``cuts`` (each with the delimiter before it), as
    the compact list of the rest."""
    if not cuts:
        return listing
    parts = []
    pos = 0
    for start, end in sorted(cuts):
        parts.append(listing[pos:start])
        pos = end
    parts.append(listing[pos:])
    rest = b"".join(parts)
    if rest[:1] == b",":  # the first entry was cut: the next one opens the list
        return b"[" + rest[1:]
    return rest if rest[:1] == b"[" else b"[" + rest


def _before_next(
    answer: bytes, names: bytes, pos: int, added: dict[int, tuple[bytes, bytes]]
) -> int:
    """Where in ``answer`` an entry of ``names`` that ends at ``pos`` goes: at the piece of
    the next listed name that is not being added, or at the end; -1: not found once."""
    while names[pos] == 0x2C:  # a comma: another entry follows
        if pos + 1 not in added:
            end = string_end(names, pos + 2)
            if end < 0:
                return -1
            return _piece(answer, names[pos + 1 : end])[0]
        pos = pos + 1 + len(added[pos + 1][0])
    return len(answer) - 1
