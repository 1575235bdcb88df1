"""What the API-load benchmarks share: counting the requests in-process components send.

The components run as threads of the benchmark, each with its own lightkube client; httpx2 logs
one "HTTP Request" line per request, and the line's thread name says whose it is. A request is
counted by (component, verb, resource): the verb as the API server names it (``LIST`` and
``WATCH`` apart from ``GET``), the resource the last plural of the path that is not a name.
"""

from __future__ import annotations

import collections
import logging
import sys
import threading
import urllib.parse
from collections.abc import Callable
from typing import Any

#: (component, verb, resource) -> requests.
Counts = collections.Counter[tuple[str, str, str]]

#: Sub-resources: a request to ``.../<name>/status`` counts as one to the parent resource.
_SUBRESOURCES = frozenset(("status", "scale", "eviction", "binding"))


def verb_and_resource(method: str, url: str) -> tuple[str, str]:
    """The API server's verb and resource of one request, e.g. ``("LIST", "nodes")``."""
    split = urllib.parse.urlsplit(url)
    parts = [p for p in split.path.split("/") if p]
    # /api/v1/... or /apis/<group>/<version>/...
    rest = parts[2:] if parts[:1] == ["api"] else parts[3:]
    if rest[:1] == ["namespaces"] and len(rest) > 2:
        rest = rest[2:]
    if rest and rest[-1] in _SUBRESOURCES and len(rest) >= 3:
        rest = rest[:-1]
    resource = rest[0] if rest else split.path
    collection = len(rest) == 1
    if "watch=true" in split.query:
        return "WATCH", resource
    if method == "GET" and collection:
        return "LIST", resource
    return method, resource


class RequestCounter(logging.Handler):
    """Counts httpx2's "HTTP Request" log lines by component, verb and resource."""

    def __init__(self, component: Callable[[str], str]) -> None:
        super().__init__(logging.INFO)
        self.component = component
        self._mutex = threading.Lock()
        self.counts: Counts = collections.Counter()

    def emit(self, record: logging.LogRecord) -> None:
        if not record.getMessage().startswith("HTTP Request"):
            return
        method, url = str(record.args[0]), str(record.args[1])  # type: ignore[index]
        verb, resource = verb_and_resource(method, url)
        key = (self.component(record.threadName or ""), verb, resource)
        with self._mutex:
            self.counts[key] += 1

    def take(self) -> Counts:
        """The counts since the last call (and start counting afresh)."""
        with self._mutex:
            counts, self.counts = self.counts, collections.Counter()
        return counts

    def install(self) -> RequestCounter:
        """Receive httpx2's request lines (and only them: nothing else is logged below ERROR)."""
        httpx_log = logging.getLogger("httpx2")
        httpx_log.setLevel(logging.INFO)
        httpx_log.propagate = False
        httpx_log.addHandler(self)
        logging.basicConfig(level=logging.ERROR)
        return self


def total(counts: Counts, component: str) -> int:
    return sum(n for (c, _, _), n in counts.items() if c == component)


def by_verb(counts: Counts, component: str) -> dict[str, int]:
    """``"VERB resource" -> requests`` of one component."""
    return {f"{v} {r}": n for (c, v, r), n in sorted(counts.items()) if c == component}


def deep_bytes(objs: list[Any]) -> int:
    """Bytes of the Python objects reachable from ``objs`` through dicts, lists and tuples,
    each counted once (an interned string many objects share, once)."""
    seen: set[int] = set()
    total = 0
    stack: list[Any] = list(objs)
    while stack:
        obj = stack.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        total += sys.getsizeof(obj)
        if isinstance(obj, dict):
            stack.extend(obj.keys())
            stack.extend(obj.values())
        elif isinstance(obj, (list, tuple)):
            stack.extend(obj)
    return total
