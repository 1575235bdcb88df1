"""The interface every discovery backend implements."""

from __future__ import annotations

from typing import Protocol

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.model import Device


class Backend(Protocol):
    """Finds one family of devices. Backends run in order; each claims the PCI functions it
    reports so that a later, more generic backend does not report them again."""

    name: str

    def discover(self, ctx: DiscoveryContext) -> list[Device]: ...
