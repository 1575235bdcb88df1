"""Device health for the kubelet's DRAResourceHealth stream (NodeWatchResources).

:class:`HealthBoard` holds each device's current health; the stream sends the whole board when
it opens and again after every change.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator, Mapping

from kubeacc.agent.kubeletapi import drahealth_v1alpha1_pb2 as hpb
from kubeacc.model import HealthState

_STATE = {
    HealthState.HEALTHY: hpb.HEALTHY,
    HealthState.UNHEALTHY: hpb.UNHEALTHY,
    HealthState.UNKNOWN: hpb.UNKNOWN,
}


class HealthBoard:
    def __init__(self, pool: str) -> None:
        self.pool = pool
        self._cond = threading.Condition()
        self._version = 0
        self._closed = False
        #: device -> (state, message, last change, unix seconds)
        self._devices: dict[str, tuple[HealthState, str, int]] = {}

    def update(self, devices: Mapping[str, tuple[HealthState, str]]) -> bool:
        """Replace the board; wakes the streams if anything changed. True if it did."""
        now = int(time.time())
        with self._cond:
            new = {}
            for name, (state, msg) in devices.items():
                old = self._devices.get(name)
                same = old is not None and old[:2] == (state, msg)
                new[name] = old if same and old is not None else (state, msg, now)
            if new == self._devices:
                return False
            self._devices = new
            self._version += 1
            self._cond.notify_all()
            return True

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()

    def snapshot(self) -> hpb.NodeWatchResourcesResponse:
        with self._cond:
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

    def watch(
        self, active: threading.Event | None = None, poll: float = 1.0
    ) -> Iterator[hpb.NodeWatchResourcesResponse]:
        """The board now, then after each change; ends when closed or ``active`` is cleared."""
        seen = -1
        while True:
            with self._cond:
                while self._version == seen and not self._closed:
                    self._cond.wait(poll)
                    if active is not None and not active.is_set():
                        return
                if self._closed:
                    return
                seen = self._version
                msg = self._message()
            yield msg
