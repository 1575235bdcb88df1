"""The three extender verbs over the state: filter, prioritize, bind.

Wire format: ``k8s.io/kube-scheduler/extender/v1`` (Go field names, no JSON tags):
``ExtenderArgs{Pod, Nodes, NodeNames}``, ``ExtenderFilterResult{Nodes, NodeNames, FailedNodes,
FailedAndUnresolvableNodes, Error}``, ``HostPriorityList[{Host, Score}]`` (0..10),
``ExtenderBindingArgs{PodName, PodNamespace, PodUID, Node}``, ``ExtenderBindingResult{Error}``.

Bind is where a decision becomes real: under the state lock the pod is placed again on the
node as it is *now* and the result reserved; then the decision is written on the pod and the
Binding created. Two pods racing for the last memory of a GPU: the second bind finds the GPU
taken by the first one's reservation and answers an error, so the scheduler re-queues that pod
(its event and condition carry the reason).
"""

from __future__ import annotations

import dataclasses
import logging
import threading
import time
from collections.abc import Mapping
from itertools import filterfalse
from typing import Any, Protocol, cast

import msgspec

from kubeacc.contracts.wants import Decision, PodWant, WantError, pod_want
from kubeacc.extender.answers import Answers, Kind
from kubeacc.extender.derive import derive
from kubeacc.extender.memo import Ticket
from kubeacc.extender.placement import NO_GPUS, grouping, place, plain_matcher, want_key
from kubeacc.extender.splice import fit_list_is
from kubeacc.extender.state import State

log = logging.getLogger(__name__)


class Binder(Protocol):
    def get_pod(self, namespace: str, name: str) -> dict[str, Any]: ...

    def record(self, namespace: str, name: str, uid: str, decision: Decision) -> None: ...

    def bind(self, namespace: str, name: str, uid: str, node: str) -> None: ...


class BindError(RuntimeError):
    """A bind that did not happen; the message goes back to the scheduler."""


def _names(args: Mapping[str, Any]) -> tuple[list[str], list[dict[str, Any]] | None]:
    names = args.get("NodeNames")
    if names is not None:
        return list(names), None
    nodes = list(((args.get("Nodes") or {}).get("items")) or [])
    return [str((n.get("metadata") or {}).get("name", "")) for n in nodes], nodes


class Extender:
    def __init__(self, state: State, binder: Binder | None = None) -> None:
        self.state = state
        self.binder = binder
        self.answers = Answers(state)
        self._locks_lock = threading.Lock()
        self.counts = {
            "filter": 0,
            "prioritize": 0,
            "bind": 0,
            "bind_refused": 0,
            "answers_kept_given": 0,
            "answers_mended": 0,
            "answers_derived": 0,
        }
        self._node_locks: dict[str, threading.Lock] = {}

    # -- kept answers (kubeacc/extender/memo.py) ---------------------------------------------
    def recall(self, verb: str, pod: Mapping[str, Any] | None, names: bytes) -> bytes | Ticket:
        """Filter's or prioritize's answer for ``pod`` and the node names ``names`` (a JSON
        list, as sent), when it is kept; else the ticket to :meth:`keep` it under once
        computed. ``pod`` must have passed the shape check."""
        try:
            want = pod_want(pod or {})
        except WantError:
            want = None
        with self.state.lock:
            if want is None or want.empty:
                # answered without any node's answer: nothing is kept for these
                return Ticket(None, verb, 0, names)
            kind = self._kind(want)
            version = kind.fit_version if verb == "filter" else kind.version
            got = kind.memo.recall(verb, version, names, kind.version)
            if got is None:
                got = self._mended(kind, verb, version, names)
            if got is None:
                return Ticket(kind.memo, verb, version, names, kind.version)
            self.counts[verb] += 1
            self.counts["answers_kept_given"] += 1
            return got

    def _mended(self, kind: Kind, verb: str, version: int, names: bytes) -> bytes | None:
        """The newest kept answer of ``verb`` for ``names`` with the nodes changed since
        mended in (a bound replica changed its node's score, or made it fit no more), kept
        at the current ``version``."""
        old = kind.memo.newest(verb, names)
        if old is None:
            return self._derived(kind, version, names) if verb == "prioritize" else None
        if verb == "filter":
            if old.listed is not None and not old.unique:  # once per list computed
                old.unique = len(set(old.listed)) == len(old.listed)
                if not old.unique:
                    old.listed = None  # its entries' order is not the names' order
            mended = self.answers.mend_filter(kind, old.since, old.answer, old.listed)
        else:
            mended = self.answers.mend(kind, old.since, old.answer)
        if mended is not None:
            ticket = Ticket(kind.memo, verb, version, names, kind.version)
            kind.memo.store(ticket, mended, old.listed, old.unique)
            self.counts["answers_mended"] += 1
        return mended

    def _derived(self, kind: Kind, version: int, names: bytes) -> bytes | None:
        """Prioritize's answer for ``names`` derived from a kept one of a list a few names
        apart (:mod:`kubeacc.extender.derive`), when ``names`` are the nodes that fit in a
        kept filter answer (after a bind: filter's mended answer without the bound node)."""
        memo = kind.memo
        if not any(fit_list_is(kept.answer, names) for kept in memo.kept("filter")):
            return None
        for old in memo.kept("prioritize"):
            got = derive(self.answers, kind, old, names)
            if got is not None:
                memo.store(Ticket(memo, "prioritize", version, names, kind.version), got)
                self.counts["answers_derived"] += 1
                return got
        return None

    def keep(self, ticket: Ticket, answer: bytes, listed: list[str] | None = None) -> None:
        """Keep ``answer``, computed after ``ticket`` was taken (``listed``: the ticket's
        names decoded, which must not change afterwards; filter's are mended with them)."""
        if ticket.memo is not None:
            with self.state.lock:
                ticket.memo.store(ticket, answer, listed)

    # -- filter -----------------------------------------------------------------------------
    def filter(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.counts["filter"] += 1
        pod = args.get("Pod") or {}
        names, nodes = _names(args)
        passed: list[str] = []
        failed: dict[str, str] = {}
        unresolvable: dict[str, str] = {}
        try:
            want = pod_want(pod)
        except WantError as err:
            unresolvable = dict.fromkeys(names, str(err))
            return self._filtered(nodes, [], failed, unresolvable)
        if want.empty:
            return self._filtered(nodes, names, failed, unresolvable)
        with self.state.lock:
            kind = self._kind(want)
            fits, fails = kind.fits, kind.fails
            passed = kind.filter(names)
            if len(passed) < len(names):
                out = list(filterfalse(fits.__contains__, names))
                reasons = list(map(fails.get, out))
                if all(reasons):  # every one known (a reason is never empty): all in C
                    failed = dict(zip(out, cast(list[str], reasons), strict=True))
                else:
                    for name, reason in zip(out, reasons, strict=True):
                        if reason is None:
                            unresolvable[name] = NO_GPUS
                        else:
                            failed[name] = reason
        return self._filtered(nodes, passed, failed, unresolvable)

    def _kind(self, want: PodWant) -> Kind:
        """Every node's current answer for ``want`` (call with the state lock held)."""
        return self.answers.kind(want_key(want), lambda: plain_matcher(want), grouping(want))

    @staticmethod
    def _filtered(
        nodes: list[dict[str, Any]] | None,
        passed: list[str],
        failed: dict[str, str],
        unresolvable: dict[str, str],
    ) -> dict[str, Any]:
        out: dict[str, Any] = {
            "FailedNodes": failed,
            "FailedAndUnresolvableNodes": unresolvable,
            "Error": "",
        }
        if nodes is None:
            out["NodeNames"] = passed
            out["Nodes"] = None
        else:
            keep = set(passed)
            out["Nodes"] = {
                "items": [n for n in nodes if (n.get("metadata") or {}).get("name") in keep]
            }
            out["NodeNames"] = None
        return out

    # -- prioritize -------------------------------------------------------------------------
    def prioritize(self, args: Mapping[str, Any]) -> list[dict[str, Any]]:
        """HostPriorityList as objects; :meth:`prioritize_json` is the same, encoded."""
        return list(msgspec.json.decode(self.prioritize_json(args)))

    def prioritize_json(self, args: Mapping[str, Any]) -> bytes:
        """The HostPriorityList for ``args``, JSON-encoded: a node that does not fit (or is
        unknown) scores 0."""
        self.counts["prioritize"] += 1
        pod = args.get("Pod") or {}
        names, _ = _names(args)
        try:
            want = pod_want(pod)
        except WantError:
            want = None
        with self.state.lock:
            if want is None or want.empty:
                return self.answers.priorities(None, names)
            return self.answers.priorities(self._kind(want), names)

    # -- bind -------------------------------------------------------------------------------
    def bind(self, args: Mapping[str, Any]) -> dict[str, Any]:
        self.counts["bind"] += 1
        try:
            self._bind(
                str(args.get("PodNamespace", "")),
                str(args.get("PodName", "")),
                str(args.get("PodUID", "")),
                str(args.get("Node", "")),
            )
        except BindError as err:
            self.counts["bind_refused"] += 1
            log.info("bind refused: %s", err)
            return {"Error": str(err)}
        return {"Error": ""}

    def decide(self, pod: Mapping[str, Any], want: PodWant, node: str) -> Decision:
        """Place ``pod`` on ``node`` now and reserve the result (under the state lock)."""
        uid = str((pod.get("metadata") or {}).get("uid") or "")
        name = (pod.get("metadata") or {}).get("name")
        with self.state.lock:
            view = self.state.node(node)
            if view is None:
                raise BindError(f"pod {name}: node {node} has no kubeacc GPUs")
            f = place(view, want)
            if f.decision is None:
                raise BindError(f"pod {name}: node {node}: {f.reason} (taken since filter)")
            decision = dataclasses.replace(f.decision, at=round(time.time(), 6))
            self.state.reserve(uid, decision)
            return decision

    def _bind(self, namespace: str, name: str, uid: str, node: str) -> None:
        binder = self.binder
        if binder is None:
            raise BindError("this extender does not bind")
        if not (namespace and name and node):
            raise BindError("bind: PodName, PodNamespace and Node are required")
        try:
            pod = binder.get_pod(namespace, name)
        except Exception as err:
            raise BindError(f"pod {namespace}/{name}: cannot read it: {err}") from err
        actual = str((pod.get("metadata") or {}).get("uid") or "")
        if uid and actual != uid:
            raise BindError(f"pod {namespace}/{name}: UID {actual} is not {uid} (recreated)")
        try:
            want = pod_want(pod)
        except WantError as err:
            raise BindError(f"pod {namespace}/{name}: {err}") from err
        if want.empty:
            self._do_bind(binder, namespace, name, actual, node)
            return
        # One node's pods are bound in the order of their decisions: the kubelet then admits
        # them in that order, the order its device plugin hands the decisions out in.
        with self._node_lock(node):
            decision = self.decide(pod, want, node)
            try:
                binder.record(namespace, name, actual, decision)
                self._do_bind(binder, namespace, name, actual, node)
                self.state.bound(actual)
            except BindError:
                self.state.release(actual)
                raise
            except Exception as err:
                self.state.release(actual)
                raise BindError(f"pod {namespace}/{name}: {err}") from err
        log.info("bound %s/%s to %s: %s", namespace, name, node, decision.to_json())

    def _node_lock(self, node: str) -> threading.Lock:
        with self._locks_lock:
            return self._node_locks.setdefault(node, threading.Lock())

    @staticmethod
    def _do_bind(binder: Binder, namespace: str, name: str, uid: str, node: str) -> None:
        try:
            binder.bind(namespace, name, uid, node)
        except Exception as err:
            raise BindError(f"pod {namespace}/{name}: binding to {node} failed: {err}") from err
