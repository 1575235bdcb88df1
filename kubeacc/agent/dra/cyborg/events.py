"""The endpoint Cyborg's conductor notifies when it has bound an ARQ: kube-acc in Nova's place.

Cyborg sends ``POST .../os-server-external-events`` with events named
``accelerator-request-bound``, each tagged with the ARQ's UUID and a status (``completed`` or
``failed``), to the ``[nova]`` endpoint of its configuration. :class:`BindEvents` serves that
path (under any prefix, as Nova's ``/v2.1``), answers as Nova would (200, each event with its
code), and wakes whoever waits for that ARQ. A caller that is not Cyborg (the token does not
match ``eventsToken``, where one is set) gets 401 and wakes nobody. Waiting never depends on the
event alone: :meth:`wait` also asks Cyborg for the ARQ's state, so a lost event costs a poll
interval, not the claim.
"""

from __future__ import annotations

import hmac
import json
import logging
import threading
from typing import Any

from kubeacc.netserve.limits import Limits
from kubeacc.netserve.server import BodyError, BoundedHandler, BoundedHTTPServer

log = logging.getLogger(__name__)

EVENT_NAME = "accelerator-request-bound"
_PATH = "/os-server-external-events"
#: Cyborg's conductor: a few connections, small bodies (one event per ARQ of a bind).
EVENT_LIMITS = Limits(max_connections=8, work_timeout=10.0, max_body=1 << 20)
#: The compute microversion Cyborg's conductor asks for (2.82 added this event).
_MICROVERSION = "2.82"


class BindEvents:
    """The event endpoint and the ARQs waited for (one per node agent)."""

    def __init__(self, address: tuple[str, int] | None, token: str = "") -> None:
        self.token = token
        self._cond = threading.Condition()
        #: ARQ UUID -> the status its event said
        self._seen: dict[str, str] = {}
        #: events taken since start (the tests: Cyborg did notify its consumer)
        self.received = 0
        self._server: BoundedHTTPServer | None = None
        self._address = address

    @property
    def port(self) -> int:
        assert self._server is not None
        return self._server.port

    def start(self) -> None:
        if self._address is None or self._server is not None:
            return
        events = self

        class Handler(BoundedHandler):
            def do_POST(self) -> None:
                events._post(self)

            def do_GET(self) -> None:
                events._versions(self)

        self._server = BoundedHTTPServer(self._address, Handler, EVENT_LIMITS, name="cyborg-events")
        self._server.start()
        log.info("Cyborg's bind events taken on port %d", self.port)

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    def _versions(self, req: BoundedHandler) -> None:
        """The version document a Nova client reads before its first call (openstacksdk's
        discovery): the one version, 2.1, with Cyborg's microversion among those it takes."""
        host = req.headers.get("Host") or f"127.0.0.1:{self.port}"
        version = {
            "id": "v2.1",
            "status": "CURRENT",
            "version": _MICROVERSION,
            "min_version": "2.1",
            "updated": "2013-07-23T11:33:21Z",
            "links": [{"rel": "self", "href": f"http://{host}/v2.1/"}],
        }
        if req.path.rstrip("/").endswith("/v2.1"):
            self._answer(req, 200, {"version": version})
        else:
            self._answer(req, 200, {"versions": [version]})

    def _post(self, req: BoundedHandler) -> None:
        if not req.path.rstrip("/").endswith(_PATH):
            self._answer(req, 404, {"error": "not found"})
            return
        given = req.headers.get("X-Auth-Token", "")
        if self.token and not hmac.compare_digest(given.encode(), self.token.encode()):
            self._answer(req, 401, {"error": "unauthorized"})
            return
        try:
            body = json.loads(req.read_body(req.body_length()))
            events = list(body["events"])
        except BodyError as exc:
            self._answer(req, exc.code, {"error": str(exc)})
            return
        except (ValueError, KeyError, TypeError):
            self._answer(req, 400, {"error": "not a list of events"})
            return
        answered = []
        with self._cond:
            for ev in events:
                if isinstance(ev, dict) and ev.get("name") == EVENT_NAME and ev.get("tag"):
                    self._seen[str(ev["tag"])] = str(ev.get("status", ""))
                    self.received += 1
                    answered.append({**ev, "code": 200})
                else:
                    answered.append({**ev, "code": 400} if isinstance(ev, dict) else {"code": 400})
            self._cond.notify_all()
        self._answer(req, 200, {"events": answered})

    @staticmethod
    def _answer(req: BoundedHandler, code: int, body: Any) -> None:
        req.send_body(code, json.dumps(body).encode(), "application/json")

    def status(self, arq: str) -> str:
        """What the last event for ``arq`` said ("" if none came)."""
        with self._cond:
            return self._seen.get(arq, "")

    def wait(self, arqs: set[str], seconds: float) -> None:
        """Until an event came for every one of ``arqs`` or ``seconds`` passed."""
        with self._cond:
            self._cond.wait_for(lambda: arqs <= self._seen.keys(), seconds)

    def forget(self, arqs: set[str]) -> None:
        with self._cond:
            for a in arqs:
                self._seen.pop(a, None)
