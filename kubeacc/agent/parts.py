"""What :func:`kubeacc.agent.compose.compose_agent` hands the agent: its collaborators, built."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

import msgspec
from lightkube import Client

from kubeacc.agent.dra.claims import WatchingClaimSource
from kubeacc.agent.dra.devices import DeviceInfo
from kubeacc.agent.dra.devicestatus import DeviceStatusWriter
from kubeacc.agent.dra.driver import Driver
from kubeacc.agent.dra.mig.prepare import MigPartitions
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.node.sharelimit import Limiter
from kubeacc.node.userspace.provider import DriverUserSpace

if TYPE_CHECKING:
    from kubeacc.agent.dra.cyborg.backend import CyborgBackend
    from kubeacc.agent.dra.fpga.binding import FpgaBinder


class Relay(msgspec.Struct):
    """What collaborators built before the agent read from it or tell it: the devices of its
    last discovery pass (the driver prepares from them) and "the devices' users changed"."""

    index: dict[str, DeviceInfo] = msgspec.field(default_factory=dict)
    on_users_changed: Callable[[], None] = lambda: None

    def devices(self) -> dict[str, DeviceInfo]:
        return self.index

    def users_changed(self) -> None:
        self.on_users_changed()


class AgentParts(msgspec.Struct, kw_only=True):
    """The agent's collaborators, built by :func:`compose_agent`."""

    client: Client
    prepare_client: Client
    metrics: AgentMetrics
    driver: Driver
    partitions: MigPartitions
    limiter: Limiter
    user_space: DriverUserSpace
    relay: Relay
    #: The agent's watch of its node's claims, which it starts (None: a source was given).
    claims: WatchingClaimSource | None
    #: Writes claims' status.devices (None: off, or no kubelet plugin).
    status: DeviceStatusWriter | None
    #: Loads claims' bitstreams before binding (None: off).
    binder: FpgaBinder | None
    #: The node's devices are Cyborg's (its discovery replaces the host's; None: the host's).
    cyborg: CyborgBackend | None = None
