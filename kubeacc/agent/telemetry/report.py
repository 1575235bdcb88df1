"""Device faults to the controller: ``status.lastFault`` of the device's Accelerator.

The remediation loop (kubeacc.controller.remediator) acts on faults; it reads them from the
Accelerator the node agent already keeps, not from Events (which are lossy, aggregated and
free text). Each fault is one server-side apply of ``status.lastFault`` under the field
manager ``kubeacc-faults-<node>`` (so it never fights the users or the life-cycle agent's
fields). ``time`` identifies the fault: the controller acts once per new time. An Accelerator
has one ``lastFault``, so a device's faults are written one per pass, in the order found (an XID
and a HealthFailing threshold in the same pass are two writes, a pass apart, each with its own
time); at most ``QUEUE`` wait per device, the oldest dropped first. A write that fails (API
server away) is kept, with its time, and tried again at the next pass; a device without an
Accelerator (no life-cycle agent on the node) is only logged.
"""

from __future__ import annotations

import datetime as dt
import logging
from collections import deque
from typing import Any

from lightkube import ApiError, Client
from lightkube.types import PatchType

from kubeacc.agent.telemetry.faults import DeviceFault
from kubeacc.crds.api import API_VERSION, EventClass
from kubeacc.crds.resources import Accelerator, is_not_found
from kubeacc.crds.schemastructs import to_api, validate

log = logging.getLogger(__name__)

#: Faults waiting per device behind the one being written.
QUEUE = 16


#: A report: the Struct of ``status.lastFault`` in the Accelerator schema (schemastructs).
FaultReport = Any


def report_of(fault: DeviceFault, at: dt.datetime) -> FaultReport:
    """The report of ``fault``, checked against the Accelerator schema's ``status.lastFault``."""
    report = {
        "event": fault.event.value,
        "xid": fault.xid,
        "detail": fault.detail[:256],
        "failures": fault.failures if fault.event is EventClass.HEALTH_FAILING else None,
        "time": at.isoformat(timespec="microseconds").replace("+00:00", "Z"),
    }
    return validate("Accelerator", "status.lastFault", report)


class FaultReporter:
    def __init__(self, client: Client, node: str) -> None:
        self.client = client
        self.node = node
        self.field_manager = f"kubeacc-faults-{node}"
        #: Accelerator name -> the report being written (its time fixed at the first try).
        self._pending: dict[str, FaultReport] = {}
        #: Accelerator name -> faults found, not yet tried, oldest first.
        self._waiting: dict[str, deque[DeviceFault]] = {}
        self.written = 0
        self.dropped = 0

    def report(self, faults: list[DeviceFault]) -> None:
        """Queue the new faults, then write one per device: the one still pending, else the
        device's oldest waiting; raises the first API error after trying every write."""
        at = dt.datetime.now(dt.UTC)
        for f in faults:
            queue = self._waiting.setdefault(f"{self.node}-{f.device}", deque())
            if len(queue) == QUEUE:
                self.dropped += 1
                log.warning("%s: too many faults waiting, dropping %s", f.device, queue[0].event)
                queue.popleft()
            queue.append(f)
        for name, queue in list(self._waiting.items()):
            if name not in self._pending:
                self._pending[name] = report_of(queue.popleft(), at)
            if not queue:
                del self._waiting[name]
        error: Exception | None = None
        for name, rep in list(self._pending.items()):
            try:
                self._write(name, rep)
            except ApiError as exc:
                if is_not_found(exc):
                    log.info("%s: no Accelerator to report %s on", name, rep.event)
                else:
                    error = error or exc
                    continue
            except Exception as exc:  # API server away: kept for the next pass
                error = error or exc
                continue
            del self._pending[name]
        if error is not None:
            raise error

    def _write(self, name: str, rep: FaultReport) -> None:
        self.client.patch(
            Accelerator.Status,
            name,
            {
                "apiVersion": API_VERSION,
                "kind": "Accelerator",
                "metadata": {"name": name},
                "status": {"lastFault": to_api(rep)},
            },
            patch_type=PatchType.APPLY,
            field_manager=self.field_manager,
            force=True,
        )
        self.written += 1
