"""Every node's answer (score, reason) for one kind of pod, kept current between requests.

kube-scheduler asks the extender about one pod twice (filter, then prioritize) and about the
replicas of a Deployment again and again, each time with every candidate node: at 5,000 nodes
a walk over the nodes per call was most of a verb's time. :class:`Answers` holds, per kind of
request (:func:`~kubeacc.extender.placement.want_key`), the answer of every node of the state,
computed once; a later call first re-answers only the nodes the state logged as changed since
(:meth:`State.changed_since`), so a node's change shows in the very next answer. Filter then
keeps the candidates that fit with one set lookup each, and prioritize joins pre-encoded JSON
pieces (``{"Host":"node-1","Score":7}``) instead of building and encoding a dict per node.
A new kind whose answer a node signature decides (``placement.grouping``) is answered once per
signature present (``State.groups``), not once per node.

All methods must be called with ``state.lock`` held.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Iterable
from itertools import chain, filterfalse, islice, repeat
from operator import getitem
from typing import cast

import msgspec

from kubeacc.extender.memo import AnswerMemo
from kubeacc.extender.placement import MAX_SCORE, NO_GPUS, Match
from kubeacc.extender.splice import END, FAILED, PASSED, UNRESOLVABLE, Edit, spliced, string_end
from kubeacc.extender.state import State

#: Kinds of request whose answers are kept (the least recently used are dropped).
KINDS = 16
#: Changed nodes remembered per kind (the older half is dropped past it).
CHANGES = 1024
#: At most this many changed nodes are mended into a kept filter or prioritize answer; more
#: are answered anew.
MEND = 16

_encode = msgspec.json.encode


class Kind:
    """The answers of every node of the state for one kind of request."""

    def __init__(
        self,
        match: Match,
        piece: Callable[[str, int], bytes],
        group: str | None = None,
        table: Callable[[list[str]], Iterable[tuple[bytes, ...]]] | None = None,
    ) -> None:
        self.match = match
        self.piece = piece
        #: The node signature that decides the answer (``state.SIGNATURES``), if one does:
        #: a full update then answers one node of each signature for all of its nodes.
        self.group = group
        #: The prioritize pieces of some nodes, for the scores 0..MAX_SCORE each.
        self.table = table
        self.epoch = -1
        #: Score of every node that fits.
        self.fits: dict[str, int] = {}
        #: Reason of every node that does not.
        self.fails: dict[str, str] = {}
        #: The prioritize piece (``{"Host":...,"Score":...}``) of every node that fits: a
        #: HostPriorityList is then one ``map`` over the names, in C.
        #: (None: not built yet, after an answer by signature; :attr:`scored` builds it.)
        self._scored: dict[str, bytes] | None = {}
        #: The last filter's answer: (epoch, the nodes it kept), so that prioritize of the
        #: same nodes before anything changes joins their pieces without looking for
        #: unknown or unfit ones.
        self.filtered: tuple[int, list[str]] | None = None
        #: Grow whenever a node's answer changes (not at every change of the state): any of
        #: it (prioritize's answers are kept under it, :mod:`kubeacc.extender.memo`), or
        #: whether it fits and why not (filter's: a new score leaves them as they were).
        self.version = 0
        self.fit_version = 0
        #: (version, node) of the nodes whose answer changed, complete after
        #: ``changes_from``: a kept prioritize answer is mended from them (memo.py).
        self.changes: list[tuple[int, str]] = []
        self.changes_from = 0
        self.memo = AnswerMemo()

    @property
    def scored(self) -> dict[str, bytes]:
        """The prioritize piece (``{"Host":...,"Score":...}``) of every node that fits."""
        got = self._scored
        if got is None:
            names = list(self.fits)
            got = self._scored = dict(zip(names, self._table_pieces(names), strict=True))
        return got

    def _table_pieces(self, names: list[str]) -> Iterable[bytes]:
        """The pieces of ``names`` (nodes that fit, every score within the table) from the
        answers' table (only while :attr:`_scored` is not built, after an answer by
        signature)."""
        assert self.table is not None
        return map(getitem, self.table(names), map(self.fits.__getitem__, names))

    def pieces(self, names: list[str]) -> Iterable[bytes]:
        """The prioritize pieces of ``names``, nodes that fit."""
        if self._scored is None:
            return self._table_pieces(names)
        return map(self._scored.__getitem__, names)

    def filter(self, names: list[str]) -> list[str]:
        """The ``names`` that fit, in their order (remembered for :meth:`Answers.priorities`).

        One C-level pass over the keys only: reading the pieces here too would touch 5,000
        more objects per call, which on a busy machine are rarely in the CPU's caches.
        """
        passed = list(filter(self.fits.__contains__, names))
        self.filtered = (self.epoch, passed)
        return passed

    def _answer(self, state: State, node: str) -> int:
        """Answer ``node`` again: 0 the same answer, 1 only its score changed, 2 whether it
        fits or why not changed."""
        view = state.nodes.get(node)
        before = (self.fits.pop(node, None), self.fails.pop(node, None))
        self.scored.pop(node, None)
        after: tuple[int | None, str | None] = (None, None)
        if view is not None:
            score, reason = self.match(view)
            if reason:
                self.fails[node] = reason
                after = (None, reason)
            else:
                self.fits[node] = score
                self.scored[node] = self.piece(node, score)
                after = (score, None)
        if before == after:
            return 0
        same_fit = (before[0] is None) == (after[0] is None) and before[1] == after[1]
        return 1 if same_fit else 2

    def update(self, state: State) -> None:
        """Bring the answers up to the state's current epoch."""
        epoch = state.epoch
        if epoch == self.epoch:
            return
        changed = state.changed_since(self.epoch) if self.epoch >= 0 else None
        if changed is None or len(changed) > len(state.nodes):
            if self.group is not None and self.table is not None:
                self._answer_groups(state)
            else:
                self.fits, self.fails = {}, {}
                match, fits, fails = self.match, self.fits, self.fails
                for node, view in state.nodes.items():
                    score, reason = match(view)
                    if reason:
                        fails[node] = reason
                    else:
                        fits[node] = score
                piece = self.piece
                self._scored = {node: piece(node, score) for node, score in fits.items()}
            self.version += 1
            self.fit_version += 1
            self.changes, self.changes_from = [], self.version
        else:
            answer = self._answer
            nodes = set(changed)
            codes = [answer(state, node) for node in nodes]  # every node answered
            if any(codes):
                self.version += 1
                version = self.version
                self.changes.extend((version, n) for n, c in zip(nodes, codes, strict=True) if c)
                if len(self.changes) > CHANGES:
                    cut = len(self.changes) - CHANGES // 2
                    self.changes_from = self.changes[cut - 1][0]
                    del self.changes[:cut]
            if 2 in codes:
                self.fit_version += 1
        self.epoch = epoch

    def _answer_groups(self, state: State) -> None:
        """Every node's answer, one :attr:`match` per signature of :attr:`group` (a new share
        size at 5,000 nodes: 89 signatures in bench/extender.py); the nodes of one signature,
        then the nodes of each answer, take it with C-level dict updates. The pieces are
        built when first read (:attr:`scored`): a cold pod's prioritize joins those of
        filter's nodes without a 5,000-entry dict."""
        alike: dict[tuple[int, str], list[dict[str, None]]] = {}
        match, nodes = self.match, state.nodes
        for members in state.groups[self.group or ""].values():
            answer = match(nodes[next(iter(members))])
            got = alike.get(answer)
            if got is None:
                alike[answer] = [members]
            else:
                got.append(members)
        fits: dict[str, int] = {}
        fails: dict[str, str] = {}
        in_range = True
        for (score, reason), groups in alike.items():
            names = list(chain.from_iterable(groups))
            if reason:
                fails.update(zip(names, repeat(reason)))
            else:
                fits.update(zip(names, repeat(score)))
                in_range = in_range and 0 <= score <= MAX_SCORE
        self.fits, self.fails, self._scored = fits, fails, None
        if not in_range:  # a score without a piece in the table: built now, node by node
            piece = self.piece
            self._scored = {node: piece(node, s) for node, s in fits.items()}

    def changed_since(self, version: int) -> set[str] | None:
        """The nodes whose answer changed after ``version``; None: not known that far back."""
        if version < self.changes_from:
            return None
        out: set[str] = set()
        for v, node in reversed(self.changes):
            if v <= version:
                break
            out.add(node)
        return out


class Answers:
    """Per kind of request, every node's answer; see the module's text."""

    def __init__(self, state: State, kinds: int = KINDS) -> None:
        self.state = state
        self.kinds = kinds
        self._kinds: OrderedDict[object, Kind] = OrderedDict()
        #: Per node, its prioritize pieces for the scores 0..MAX_SCORE.
        self._pieces: dict[str, tuple[bytes, ...]] = {}

    def kind(self, key: object, make: Callable[[], Match], group: str | None = None) -> Kind:
        """The current answers for ``key`` (``make`` builds its matcher when new; ``group``:
        the node signature that decides its answers, :attr:`Kind.group`)."""
        got = self._kinds.get(key)
        if got is None:
            got = self._kinds[key] = Kind(make(), self.piece, group, self.table)
            if len(self._kinds) > self.kinds:
                self._kinds.popitem(last=False)
        else:
            self._kinds.move_to_end(key)
        got.update(self.state)
        return got

    def pieces(self, node: str) -> tuple[bytes, ...]:
        got = self._pieces.get(node)
        if got is None:
            host = b'{"Host":' + _encode(node) + b',"Score":'
            got = tuple(host + b"%d}" % s for s in range(MAX_SCORE + 1))
            if node in self.state.nodes:  # names the scheduler made up are not kept
                if len(self._pieces) > 2 * len(self.state.nodes) + 1024:
                    self._pieces = {}  # mostly nodes gone since
                self._pieces[node] = got
        return got

    def table(self, names: list[str]) -> Iterable[tuple[bytes, ...]]:
        """:meth:`pieces` of each of ``names``, in their order (one C-level pass when all are
        known, as they are after the first answer)."""
        pieces = self._pieces
        if next(filterfalse(pieces.__contains__, names), None) is not None:
            return [self.pieces(n) for n in names]
        return map(pieces.__getitem__, names)

    def piece(self, node: str, score: int) -> bytes:
        """``{"Host": node, "Score": score}`` encoded."""
        if 0 <= score <= MAX_SCORE:
            return (self._pieces.get(node) or self.pieces(node))[score]
        return _encode({"Host": node, "Score": score})

    def mend(self, kind: Kind, version: int, answer: bytes) -> bytes | None:
        """``answer``, prioritize's answer of some names at ``kind``'s ``version``, as it is
        now: the pieces of the nodes whose answer changed since replaced in place (found by
        their ``{"Host":<name>,"Score":`` head, unique to a node). None when that is not
        known, too many changed, or a changed node is listed twice."""
        changed = kind.changed_since(version)
        if changed is None or len(changed) > MEND:
            return None
        spans = []
        for node in changed:
            head = self.pieces(node)[0][:-2]  # the piece of score 0 without its "0}"
            at = answer.find(head)
            if at < 0:
                continue  # not among the names
            if answer.find(head, at + 1) >= 0:
                return None
            end = answer.index(b"}", at) + 1
            spans.append((at, end, kind.scored.get(node) or self.piece(node, 0)))
        spans.sort()
        parts = []
        pos = 0
        for at, end, piece in spans:
            parts += [answer[pos:at], piece]
            pos = end
        parts.append(answer[pos:])
        return b"".join(parts)

    def mend_filter(
        self, kind: Kind, version: int, answer: bytes, listed: list[str] | None
    ) -> bytes | None:
        """``answer``, filter's answer of the names ``listed`` (decoded, in their order) at
        ``kind``'s ``version``, as it is now: each node whose answer changed since taken out
        of its list (refused, unresolvable, fit) and put in its current one, before the next
        listed node of that list that did not change, or replaced where it is. None when that
        is not known, too many changed, or a changed node (or its neighbour) is found twice.
        ``listed`` must name no node twice (a refused node listed twice has one entry, at
        its first place)."""
        changed = kind.changed_since(version)
        if changed is None or len(changed) > MEND or listed is None:
            return None
        if not (answer.startswith(FAILED) and answer.endswith(END)):
            return None
        unresolvable = answer.find(UNRESOLVABLE)
        passed = answer.find(PASSED)
        if unresolvable < 0 or passed < unresolvable or answer.count(UNRESOLVABLE) != 1:
            return None
        if answer.count(PASSED) != 1:
            return None
        # each list's [start, end) in the answer: 0 refused, 1 unresolvable, 2 fit
        bounds = (
            (len(FAILED), unresolvable),
            (unresolvable + len(UNRESOLVABLE), passed),
            (passed + len(PASSED), len(answer) - len(END)),
        )
        fits, fails = kind.fits, kind.fails
        is_in = (
            fails.__contains__,
            lambda n: n not in fits and n not in fails,
            fits.__contains__,
        )
        # per list: (where, order, end of what it replaces or -1: an insertion, new entry)
        edits: tuple[list[Edit], ...] = ([], [], [])
        # changed nodes whose entry stays in its list (replaced where it is, or as it was)
        stays: dict[str, int] = {}
        moves: list[tuple[str, int, bytes]] = []
        last = len(listed) + 1  # the order of a replacement: after insertions at its place
        for node in changed:
            key = _encode(node)
            at = answer.find(key)
            if at < 0:
                continue  # not among the names
            if answer.find(key, at + 1) >= 0:
                return None
            was = 0 if at < unresolvable else 1 if at < passed else 2
            end = _entry_end(answer, at + len(key), was)
            if end < 0:
                return None
            now = 2 if node in fits else 0 if node in fails else 1
            entry = key if now == 2 else key + b":" + _encode(fails.get(node, NO_GPUS))
            if now == was:
                stays[node] = at
                if answer[at:end] != entry:
                    edits[was].append((at, last, end, entry))
            else:
                edits[was].append((at, last, end, b""))
                moves.append((node, now, entry))
        for node, now, entry in moves:
            try:
                i = listed.index(node)
            except ValueError:
                return None
            start, stop = bounds[now]
            where = stop  # after the last entry, unless a later one is in that list
            for later in filter(is_in[now], islice(listed, i + 1, None)):
                if later in stays:
                    where = stays[later]
                elif later in changed:
                    continue  # moved into that list too: placed by the order of both
                else:
                    head = _encode(later) + (b"" if now == 2 else b":")
                    where = answer.find(head, start, stop)
                    if where < 0 or answer.find(head, where + 1, stop) >= 0:
                        return None
                break
            edits[now].append((where, i + 1, -1, entry))
        if not any(edits):
            return answer
        parts = [answer[: bounds[0][0]]]
        for (start, stop), edit, tail in zip(
            bounds, edits, (UNRESOLVABLE, PASSED, END), strict=True
        ):
            if not edit:
                parts += [answer[start:stop], tail]
                continue
            parts += [spliced(answer, start, stop, edit), tail]
        return b"".join(parts)

    def priorities(self, kind: Kind | None, names: list[str]) -> bytes:
        """The JSON HostPriorityList for ``names``: 0 for nodes that do not fit or are
        unknown (for every node without ``kind``); byte for byte what encoding
        ``[{"Host": n, "Score": s}, ...]`` gives."""
        if kind is not None and kind.filtered is not None:
            epoch, passed = kind.filtered
            # the nodes filter just kept, nothing changed since: each has its piece (the
            # names are then mostly filter's own strings, compared by identity)
            if epoch == kind.epoch and names == passed:
                return b"[" + b",".join(kind.pieces(passed)) + b"]"
        # The candidates prioritize gets are those filter kept, so nearly always every name
        # has its piece in ``kind.scored``: one map in C (a comprehension with two lookups
        # per name was ~60 % of the two verbs' CPU at 5,000 nodes).
        found: list[bytes | None] = [] if kind is None else list(map(kind.scored.get, names))
        # ``all`` tests each piece's truth (a non-empty bytes, or None) in C; ``None in found``
        # compared every piece with None, a rich comparison each (~15 % of prioritize)
        if kind is None or not all(found):
            zero = self.piece
            found = found or [None] * len(names)
            found = [p if p is not None else zero(n, 0) for p, n in zip(found, names, strict=True)]
        return b"[" + b",".join(cast(list[bytes], found)) + b"]"


def _entry_end(answer: bytes, after: int, where: int) -> int:
    """Where the entry whose quoted name ends at ``after`` ends in filter's ``answer``, in
    list ``where`` (0, 1: ``"name":"reason"``; 2: ``"name"``); -1: not such an entry."""
    nxt = answer[after : after + 2]
    if where == 2:
        return after if nxt[:1] in (b",", b"]") else -1
    if nxt != b':"':
        return -1
    return string_end(answer, after + 2)  # past the reason's closing quote
