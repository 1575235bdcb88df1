"""Whole answers of filter and prioritize, kept while nothing they depend on changed.

The replicas of a Deployment reach the extender one after another with the same requests and,
until one of them is bound, the same candidate nodes: the same bytes in, the same bytes out.
Each :class:`~kubeacc.extender.answers.Kind` counts the changes of its nodes' answers
(``Kind.version``: a fit won or lost, a score or a reason changed; ``Kind.fit_version``: the
same but scores, which filter's answer does not show; a change of a node that leaves its
answer as it was counts in neither), and keeps its last few answers per verb under (the
verb's count, the candidate names exactly as they came on the wire). Binding a replica
changes its node's score, rarely whether it fits: the next replica's filter is then still
answered from what was kept. A request with a kept
answer's names at the same count is answered with the kept bytes, without reading the 5,000
names or touching a node; any other request is computed as before and its answer kept.

Prioritize's answer changes with every bind (the replica's node scores otherwise), but only
in the pieces of the nodes that changed: a kept answer of the same names at an older version
is mended, those pieces replaced in place (``Answers.mend``), when the kind still knows which
nodes changed since (``Kind.changes``) and they are few. Filter's answer changes when a bind
makes its node fit no more (or changes why another does not): a kept filter answer of the same
names is mended the same way (``Answers.mend_filter``), each changed node's entry moved or
replaced in place, from the kind's version when the answer was last known current
(:attr:`Kept.since`: when it was computed, or last given at the current ``fit_version``) and
the candidate names decoded when it was computed (:attr:`Kept.listed`, for their order).

A :class:`Ticket` is taken before the answer is computed: the count only grows, so an
answer computed after a change but kept under the older count is never given again.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

#: Answers kept per kind and verb (the candidates of the last few pods alike).
KEEP = 2


@dataclass(frozen=True)
class Ticket:
    """Where to keep the answer of one request once it is computed."""

    #: None: an answer that is not kept (a pod without GPU requests, or refused)
    memo: AnswerMemo | None
    verb: str
    version: int
    names: bytes
    #: The kind's ``version`` when the ticket was taken (``version`` is its ``fit_version``
    #: for filter): changes after it are mended into the answer (``Kind.changed_since``).
    since: int = -1


@dataclass(slots=True)
class Kept:
    """One kept answer."""

    version: int
    names: bytes
    answer: bytes
    #: The kind's ``version`` at which the answer was last known current.
    since: int
    #: ``names`` decoded (filter's, for the order of its entries; None: not known).
    listed: list[str] | None
    #: Whether :attr:`listed` is known to name no node twice (checked when first needed).
    unique: bool = False


class AnswerMemo:
    """One kind's kept answers (call with the state's lock held)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._kept: dict[str, deque[Kept]] = {}
        self.keep = keep

    def recall(self, verb: str, version: int, names: bytes, now: int = -1) -> bytes | None:
        """The answer kept for ``verb`` of ``names`` at ``version``, if any (then current at
        the kind's version ``now``, remembered for mending it later)."""
        for kept in self._kept.get(verb, ()):
            if kept.version == version and kept.names == names:
                kept.since = max(kept.since, now)
                return kept.answer
        return None

    def newest(self, verb: str, names: bytes) -> Kept | None:
        """The newest answer kept for ``verb`` of ``names``."""
        for kept in reversed(self._kept.get(verb, ())):
            if kept.names == names:
                return kept
        return None

    def kept(self, verb: str) -> list[Kept]:
        """The answers kept for ``verb``, the newest first."""
        return list(reversed(self._kept.get(verb, ())))

    def store(
        self, ticket: Ticket, answer: bytes, listed: list[str] | None = None, unique: bool = False
    ) -> None:
        """Keep ``answer`` (computed after ``ticket`` was taken) under the ticket; ``listed``:
        the ticket's names decoded (which must not change afterwards), ``unique``: known to
        name no node twice."""
        kept = self._kept.setdefault(ticket.verb, deque(maxlen=self.keep))
        while kept and kept[0].version < ticket.version:  # answers of an older count: never hit
            kept.popleft()
        since = ticket.version if ticket.since < 0 else ticket.since
        kept.append(Kept(ticket.version, ticket.names, answer, since, listed, unique))
