"""The node-name lists the extender answered recently, to read them back without decoding.

kube-scheduler calls prioritize with the nodes that passed filter, in the order filter gave
them: with one extender, prioritize's ``NodeNames`` are byte for byte the list filter
answered (Go and msgspec both encode a list of names compactly, and node names hold nothing
either escapes). At 5,000 nodes, decoding that list is 5,000 new strings whose hashes are
then computed again for every lookup; taking filter's own list back instead costs one
comparison of the bytes, and its strings already carry their hashes.

Filter's own candidates are kept too (``decode(raw, keep=True)``): kube-scheduler sends every
pod's filter the same list of nodes while the nodes stay the same, and a decoded list's
strings get their hashes computed only once, at the first lookup of each.

A list is kept only under its exact bytes, so a hit gives what decoding would give; any other
list is decoded as usual. Thread-safe: the HTTP server serves each connection in its thread.
"""

from __future__ import annotations

import threading
from collections import deque

import msgspec

#: Lists kept (filter answers of the last few pods; a scheduler asks prioritize right after
#: filter, so the one being asked for is nearly always the newest).
KEEP = 4

_decoder: msgspec.json.Decoder[list[str] | None] = msgspec.json.Decoder(list[str] | None)


class NameLists:
    def __init__(self, keep: int = KEEP) -> None:
        self._lock = threading.Lock()
        self._kept: deque[tuple[bytes, list[str]]] = deque(maxlen=keep)
        #: Lists taken back without decoding (for /state and the tests).
        self.hits = 0

    def keep(self, raw: bytes, names: list[str]) -> None:
        """Remember that ``raw`` decodes to ``names`` (which must not change afterwards)."""
        with self._lock:
            self._kept.append((raw, names))

    def decode(self, raw: bytes, keep: bool = False) -> list[str] | None:
        """``raw`` (a JSON list of strings) decoded: a kept list when the bytes are the same
        (a fresh copy of it, so the caller may change it; it is then the newest kept), else
        decoded, and kept if ``keep``; raises :class:`msgspec.DecodeError` (or its
        ``ValidationError``) as decoding does."""
        with self._lock:
            kept = self._kept
            for i in range(len(kept) - 1, -1, -1):
                kept_raw, names = kept[i]
                if len(kept_raw) == len(raw) and kept_raw == raw:
                    self.hits += 1
                    if i != len(kept) - 1:
                        del kept[i]
                        kept.append((kept_raw, names))
                    return list(names)
        got = _decoder.decode(raw)
        if keep and got is not None:
            self.keep(bytes(raw), list(got))
        return got
