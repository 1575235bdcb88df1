"""The node agent on Cyborg: its inventory source and its device kind, built together.

``kubeacc agent --inventory cyborg`` (:func:`kubeacc.agent.compose.compose_agent`) builds one
:class:`CyborgBackend`: the agent's discovery pass becomes :meth:`CyborgBackend.discover` (the
devices Cyborg reports for this node, after the undo work an earlier pass left), and the DRA
driver gets :attr:`CyborgBackend.kind`. When Cyborg or Placement does not answer, the pass
raises and the agent keeps publishing its last good inventory (docs/cyborg.md).
"""

from __future__ import annotations

from pathlib import Path

from kubeacc.agent.dra.cyborg.events import BindEvents
from kubeacc.agent.dra.cyborg.kind import BIND_TIMEOUT_S, CyborgKind
from kubeacc.model import Inventory
from kubeacc.node.cyborg.client import Credentials, CyborgClient
from kubeacc.node.cyborg.inventory import CyborgInventory
from kubeacc.node.cyborg.records import Records


class CyborgBackend:
    """Client, records, inventory, bind events and kind of one node (module doc)."""

    def __init__(
        self,
        creds: Credentials,
        node: str,
        state_dir: Path,
        events_address: tuple[str, int] | None,
        bind_timeout: float = BIND_TIMEOUT_S,
    ) -> None:
        self.client = CyborgClient(creds)
        self.records = Records(state_dir)
        self.inventory = CyborgInventory(self.client, node, self.records)
        self.events = BindEvents(events_address, creds.events_token)
        self.kind = CyborgKind(
            self.client, self.inventory, self.records, self.events, node, state_dir, bind_timeout
        )

    def start(self) -> None:
        self.events.start()

    def stop(self) -> None:
        self.events.stop()

    def discover(self) -> Inventory:
        """One pass: the undo work left for Cyborg, then its devices for this node."""
        self.kind.retry()
        return self.inventory.discover()
