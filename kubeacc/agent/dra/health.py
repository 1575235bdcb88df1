"""Device health for the kubelet's DRAResourceHealth stream (NodeWatchResources).

:class:`HealthBoard` holds each device's current health; the stream sends the whole board when
it opens, again after every change, and again every :data:`RESEND_S` seconds without one: the
kubelet takes a device it has not heard of for its health timeout (30 s unless the device says
otherwise) as Unknown, in the pod's status too, however healthy it was last said to be.

The board speaks the v1 API's messages; v1alpha1's are the same on the wire (the plugin serves
both, :mod:`kubeacc.agent.dra.plugin`).
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import AsyncIterator, Mapping

from kubeacc.model import HealthState
from kubeacc.node.kubeletapi import drahealth_v1_pb2 as hpb
from kubeacc.node.rpc import Changes

_STATE = {
    HealthState.HEALTHY: hpb.HEALTHY,
    HealthState.UNHEALTHY: hpb.UNHEALTHY,
    HealthState.UNKNOWN: hpb.UNKNOWN,
}


#: Seconds between two sends of an unchanged board (a third of the kubelet's default timeout).
RESEND_S = 10.0


class HealthBoard:
    def __init__(self, pool: str) -> None:
        self.pool = pool
        self._lock = threading.Lock()
        self._changes = Changes()
        #: device -> (state, message, last change, unix seconds)
        self._devices: dict[str, tuple[HealthState, str, int]] = {}

    def update(self, devices: Mapping[str, tuple[HealthState, str]]) -> bool:
        """Replace the board; wakes the streams if anything changed. True if it did."""
        now = int(time.time())
        with self._lock:
            new = {}
            for name, (state, msg) in devices.items():
                old = self._devices.get(name)
                same = old is not None and old[:2] == (state, msg)
                new[name] = old if same and old is not None else (state, msg, now)
            if new == self._devices:
                return False
            self._devices = new
        self._changes.bump()
        return True

    def close(self) -> None:
        """End every open stream (the plugin is stopping)."""
        self._changes.close()

    def snapshot(self) -> hpb.NodeWatchResourcesResponse:
        with self._lock:
            return self._message()

    def _message(self) -> hpb.NodeWatchResourcesResponse:
        resp = hpb.NodeWatchResourcesResponse()
        for name, (state, msg, ts) in sorted(self._devices.items()):
            dh = resp.devices.add()
            dh.device.pool_name = self.pool
            dh.device.device_name = name
            dh.health = _STATE[state]
            dh.last_updated_time = ts
            dh.message = msg
        return resp

    async def watch(self, every: float = RESEND_S) -> AsyncIterator[hpb.NodeWatchResourcesResponse]:
        """The board now, then after each change and at least every ``every`` seconds; ends
        when the board is closed."""
        seen = -1
        while True:
            try:
                version = await asyncio.wait_for(self._changes.wait(seen), every)
            except TimeoutError:
                version = seen  # nothing changed: the same board again, so it stays fresh
            if version is None:
                return
            seen = version
            yield self.snapshot()
