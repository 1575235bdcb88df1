"""lightkube plumbing shared by every long-running component (agent, life-cycle agent,
controller), kept free of heavy imports: the node agent loads it too and has a memory budget."""

from __future__ import annotations

import contextlib
from collections.abc import Iterable
from typing import Any


def prime_decoders(resources: Iterable[type[Any]]) -> None:
    """Build lightkube's response decoders for ``resources`` on this thread, before threads run.

    lightkube decodes with msgspec, which builds a Struct type's decoding info on first use and
    publishes it before it is complete (recursive types need that). Two threads decoding their
    first responses of a type at the same moment crashed a process with a segfault in msgspec
    (a field type still NULL). Decoding one empty document of each shape here builds everything
    reachable (ObjectMeta and friends included); generic (custom) resources get their list
    struct built too. Watch events and Status are always primed.
    """
    import msgspec
    from lightkube.core import decoders

    for res in resources:
        decoders.decode_list(b'{"items": []}', res)
        # The decoder is built before decoding starts; the missing fields don't matter.
        with contextlib.suppress(msgspec.ValidationError, TypeError):
            decoders.decode_object(b"{}", res)
    decoders.decode_status(b"{}")
    decoders.decode_watch_event(b'{"type": "ADDED", "object": {}}')
