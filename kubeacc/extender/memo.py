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
nodes changed since (``Kind.changes``) and they are few.

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


class AnswerMemo:
    """One kind's kept answers (call with the state's lock held)."""

    def __init__(self, keep: int = KEEP) -> None:
        self._kept: dict[str, deque[tuple[int, bytes, bytes]]] = {}
        self.keep = keep

    def recall(self, verb: str, version: int, names: bytes) -> bytes | None:
        """The answer kept for ``verb`` of ``names`` at ``version``, if any."""
        for kept_version, kept_names, answer in self._kept.get(verb, ()):
            if kept_version == version and kept_names == names:
                return answer
        return None

    def newest(self, verb: str, names: bytes) -> tuple[int, bytes] | None:
        """The newest answer kept for ``verb`` of ``names`` (its version, the answer)."""
        for kept_version, kept_names, answer in reversed(self._kept.get(verb, ())):
            if kept_names == names:
                return kept_version, answer
        return None

    def store(self, ticket: Ticket, answer: bytes) -> None:
        """Keep ``answer`` (computed after ``ticket`` was taken) under the ticket."""
        kept = self._kept.setdefault(ticket.verb, deque(maxlen=self.keep))
        while kept and kept[0][0] < ticket.version:  # answers of an older count: never hit
            kept.popleft()
        kept.append((ticket.version, ticket.names, answer))
