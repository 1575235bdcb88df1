"""HTTP front of the extender, on :mod:`kubeacc.netserve` (bounded, mutual TLS).

``POST /filter``, ``/prioritize``, ``/bind`` (the verbs of the KubeSchedulerConfiguration);
``GET /healthz`` (process alive), ``/readyz`` (leading and the watches synced), ``/state``
(counts, for people; ``/state?node=N``: node N's GPUs, their use and the pods holding them).
A replica that does not lead answers the verbs with 503.

The port speaks TLS and serves only clients with a certificate signed by the client CA (the
chart's, given to kube-scheduler): ``/bind`` binds with the extender's cluster-wide rights, so
nobody else may call it. Plain HTTP only with ``tls=None`` (``--insecure-http``, local use).
The kubelet's probes go to the separate plain probe port (``--probe-address``).

Bounds (docs/security.md, "Ports"): a body of at most :data:`MAX_BODY` bytes, the bodies of
all requests being read or decoded at once at most :data:`BODY_BUDGET`, JSON nested at most
:data:`MAX_DEPTH` deep, and the connection and time limits of :data:`EXTENDER_LIMITS`.
"""

from __future__ import annotations

import json
import logging
import ssl
from collections.abc import Callable
from typing import Any

import msgspec

from kubeacc.contracts.arenas import release_free_memory
from kubeacc.extender.memo import Ticket
from kubeacc.extender.namelists import NameLists
from kubeacc.extender.service import Extender
from kubeacc.extender.wire import FLAT, ShapeError, check_shape
from kubeacc.netserve.budget import BudgetExhausted, ByteBudget
from kubeacc.netserve.limits import Limits
from kubeacc.netserve.server import BodyError, BoundedHandler, BoundedHTTPServer

log = logging.getLogger(__name__)

#: The largest verb body. kube-scheduler (nodeCacheCapable) sends the pod and the names of the
#: candidate nodes: 0.23 MiB for 5,000 nodes with 45-character names, 1.23 MiB with the
#: longest names Kubernetes allows (bench/extender_fuzz.py); a pod object is at most
#: ~1.5 MiB (etcd's request limit). 4 MiB takes the worst of both with room to spare.
MAX_BODY = 4 << 20
#: The bodies read or decoded at one moment, all connections together: a decoded JSON
#: document can take ~25 times its size (a body of empty lists), so one largest body at a
#: time (next to any number of the scheduler's usual ~0.25 MiB ones) keeps the extender far
#: within its 512 MiB (bench/extender_fuzz.py).
BODY_BUDGET = MAX_BODY
#: How long a request waits for its share of :data:`BODY_BUDGET` before a 503.
BUDGET_WAIT = 5.0
#: A pod object is ~10 levels deep; nothing the scheduler sends is deeper than 32.
MAX_DEPTH = 32
#: After a body this large, freed heap pages go back to the kernel (malloc_trim): glibc keeps
#: them mapped otherwise, and the extender's RSS stays at its peak.
TRIM_AFTER = 1 << 20

#: The scheduler keeps connections open (Go's transport closes idle ones after 90 s; the
#: extender waits longer so that it never closes one under a request being sent) and sends
#: binds in parallel.
EXTENDER_LIMITS = Limits(
    max_connections=64,
    backlog=256,
    keepalive_timeout=120.0,
    head_timeout=5.0,
    body_timeout=10.0,
    work_timeout=60.0,
    max_body=MAX_BODY,
)

_decoder = msgspec.json.Decoder()
_encoder = msgspec.json.Encoder()


class BadRequest(ValueError):
    pass


def too_deep(value: Any, limit: int = MAX_DEPTH) -> bool:
    """Whether ``value`` (decoded JSON) nests deeper than ``limit``: a walk with one iterator
    per level, so no RecursionError and memory for ``limit`` levels, never one entry per
    node (a body of a million empty lists)."""
    if not isinstance(value, dict | list):
        return False
    stack = [iter(value.values() if isinstance(value, dict) else value)]
    while stack:
        for child in stack[-1]:
            if isinstance(child, dict | list):
                if len(stack) >= limit:
                    return True
                stack.append(iter(child.values() if isinstance(child, dict) else child))
                break
        else:
            stack.pop()
    return False


def decode_args(verb: str, raw: bytes) -> dict[str, Any]:
    """``verb``'s body as a JSON object of its shape, or :class:`BadRequest` with the reason
    in one line."""
    try:
        args = _decoder.decode(raw)
    except msgspec.DecodeError as err:
        raise BadRequest(f"not JSON: {err}") from None
    except RecursionError:
        raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels") from None
    if not isinstance(args, dict):
        raise BadRequest("the body is not a JSON object")
    try:
        check_shape(verb, args)  # first: it never descends below the typed fields
    except ShapeError as err:
        raise BadRequest(str(err)) from None
    flat = FLAT.get(verb, frozenset())
    if too_deep({k: v for k, v in args.items() if k not in flat}):
        raise BadRequest(f"JSON nested deeper than {MAX_DEPTH} levels")
    return args


class _Frame(msgspec.Struct, forbid_unknown_fields=True):
    """The fields of filter's and prioritize's body, each left as its JSON text."""

    Pod: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    NodeNames: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET
    Nodes: msgspec.Raw | msgspec.UnsetType = msgspec.UNSET


_frame_decoder = msgspec.json.Decoder(_Frame)


def decode_verb_args(verb: str, raw: bytes, lists: NameLists) -> dict[str, Any]:
    """:func:`decode_args`, with filter's and prioritize's node names read through
    ``lists`` (a list the extender answered itself is taken back, not decoded again).

    The quick way takes a body only when it is an object of the known fields, every one of
    them of its shape and depth; for anything else (bad JSON, wrong shapes, unknown or too
    deep fields) :func:`decode_args` reads the body again, so the answer, the error
    included, is the one it gives.
    """
    if verb in FLAT:
        args = _decode_quick(verb, raw, lists)
        if args is not None:
            return args
    return decode_args(verb, raw)


def _decode_quick(verb: str, raw: bytes, lists: NameLists) -> dict[str, Any] | None:
    quick = read_quick(verb, raw)
    if quick is None:
        return None
    args, names = quick
    if names is not None:
        try:
            args["NodeNames"] = lists.decode(names, keep=verb == "filter")
        except msgspec.DecodeError:
            return None
    return args


def read_quick(verb: str, raw: bytes) -> tuple[dict[str, Any], bytes | None] | None:
    """The quick way's first half: the body's fields but the node names read and checked,
    and the node names as they came (unchecked, None when absent); None: read it fully."""
    try:
        frame = _frame_decoder.decode(raw)
        args: dict[str, Any] = {}
        if not isinstance(frame.Pod, msgspec.UnsetType):
            args["Pod"] = _decoder.decode(frame.Pod)
        if not isinstance(frame.Nodes, msgspec.UnsetType):
            args["Nodes"] = _decoder.decode(frame.Nodes)
        check_shape(verb, args)
        if too_deep(args):
            return None
    except (msgspec.DecodeError, ShapeError, RecursionError):
        return None
    names = None if isinstance(frame.NodeNames, msgspec.UnsetType) else bytes(frame.NodeNames)
    return args, names


def encode_answer(verb: str, result: Any, lists: NameLists) -> bytes:
    """``result`` as JSON; the node names of a filter answer are kept in ``lists`` under
    their bytes, for prioritize to take back (:mod:`kubeacc.extender.namelists`)."""
    if isinstance(result, bytes):
        return result
    names = result.get("NodeNames") if verb == "filter" and isinstance(result, dict) else None
    if not isinstance(names, list):
        return _encoder.encode(result)
    names_raw = _encoder.encode(names)
    lists.keep(names_raw, names)
    raw_names = msgspec.Raw(names_raw)  # encoded as they are: the same bytes as the list's
    return _encoder.encode({k: raw_names if k == "NodeNames" else v for k, v in result.items()})


class ExtenderServer:
    def __init__(
        self,
        extender: Extender,
        host: str,
        port: int,
        ready: Callable[[], list[str]] = list,
        serving: Callable[[], bool] = lambda: True,
        *,
        tls: Callable[[], ssl.SSLContext] | None = None,
        limits: Limits = EXTENDER_LIMITS,
        body_budget: int = BODY_BUDGET,
    ) -> None:
        self.extender = extender
        self.ready = ready
        self.serving = serving
        self.budget = ByteBudget(body_budget)
        self.lists = NameLists()
        self.httpd = BoundedHTTPServer(
            (host, port), _handler(self), limits, tls=tls, name="extender-http"
        )

    @property
    def port(self) -> int:
        return self.httpd.port

    def start(self) -> None:
        self.httpd.start()

    def stop(self) -> None:
        self.httpd.stop()


def _handler(outer: ExtenderServer) -> type[BoundedHandler]:
    class Handler(BoundedHandler):
        def _json(self, code: int, body: bytes) -> None:
            self.send_body(code, body, "application/json")

        def _error(self, code: int, message: str) -> None:
            self._json(code, _encoder.encode({"Error": message}))

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if path == "/healthz":
                self.send_body(200, b"ok\n", "text/plain")
            elif path == "/readyz":
                problems = outer.ready()
                text = "\n".join(problems) + "\n" if problems else "ok\n"
                self.send_body(503 if problems else 200, text.encode(), "text/plain")
            elif path == "/state":
                query = self.path.partition("?")[2]
                node = query.removeprefix("node=") if query.startswith("node=") else None
                data = {
                    **outer.extender.state.summary(node),
                    **outer.extender.counts,
                    "names_reused": outer.lists.hits,
                }
                self._json(200, json.dumps(data).encode())
            else:
                self.send_body(404, b"not found\n", "text/plain")

        def do_POST(self) -> None:
            verb = self.path.split("?", 1)[0].rstrip("/").rsplit("/", 1)[-1]
            handler = {
                "filter": outer.extender.filter,
                "prioritize": outer.extender.prioritize_json,
                "bind": outer.extender.bind,
            }.get(verb)
            try:
                length = self.body_length()
            except BodyError as err:
                self.close_connection = True  # the unread body would be taken for a request
                self._error(err.code, str(err))
                return
            try:
                with outer.budget.hold(length, BUDGET_WAIT):
                    self._verb(verb, handler, length)
            except BudgetExhausted as err:
                self.close_connection = True
                self._error(503, f"busy: {err}")
            if length >= TRIM_AFTER:
                release_free_memory()

        def _verb(self, verb: str, handler: Callable[[Any], Any] | None, length: int) -> None:
            try:
                raw = self.read_body(length)
            except BodyError as err:
                self._error(err.code, str(err))
                return
            if handler is None:
                self._error(404, "unknown verb")
                return
            if not outer.serving():
                self._error(503, "this kubeacc extender replica does not lead")
                return
            ticket: Ticket | None = None
            args: dict[str, Any] | None = None
            names: bytes | None = None
            quick = read_quick(verb, raw) if verb in FLAT else None
            if quick is not None:
                args, names = quick
            if args is not None and names is not None and args.get("Nodes") is None:
                # only the names and the pod decide the answer: it may be a kept one
                try:
                    kept = outer.extender.recall(verb, args.get("Pod"), names)
                except Exception as err:  # a bug: answer, log, keep serving
                    log.exception("%s failed", verb)
                    self._error(500, f"{verb}: internal error: {err}")
                    return
                if isinstance(kept, bytes):
                    self._json(200, kept)
                    return
                ticket = kept
                try:
                    args["NodeNames"] = outer.lists.decode(names, keep=verb == "filter")
                except msgspec.DecodeError:
                    args = None  # read fully below, for its error
            try:
                if args is None:
                    args = decode_verb_args(verb, raw, outer.lists)
            except BadRequest as err:
                self._error(400, f"bad request: {err}")
                return
            del raw
            try:
                result: Any = handler(args)
            except Exception as err:  # a bug: answer, log, keep serving
                log.exception("%s failed", verb)
                self._error(500, f"{verb}: internal error: {err}")
                return
            answer = encode_answer(verb, result, outer.lists)
            if ticket is not None:
                listed = args.get("NodeNames") if verb == "filter" else None
                outer.extender.keep(ticket, answer, listed if isinstance(listed, list) else None)
            self._json(200, answer)

    return Handler
