"""Answers that say "come back later", honoured below every lightkube client kube-acc makes.

kube-apiserver answers ``429 Too Many Requests`` with ``Retry-After`` when its in-flight limits
(``--max-requests-inflight``, API Priority and Fairness) are reached, and some ``5xx`` answers
carry ``Retry-After`` too. Such a request was refused before it was served, so sending the same
request again later is safe (a write with a resourceVersion precondition still fails with 409
when the object changed meanwhile; nothing is rebuilt from an older copy here). The transport
waits the server's ``Retry-After`` (at least one second, at most :data:`MAX_WAIT`, plus up to
half again of jitter so that a fleet of agents does not come back in lockstep) and sends again,
:data:`RETRIES` times at most and never past the client's ``budget`` of seconds; then the last
answer goes to the caller, whose own loop backs off further. Answers without ``Retry-After``
(a 500 or 504 while etcd is away) go straight to the caller. The same rule as client-go's.
"""

from __future__ import annotations

import logging
import random
import threading
import time

import httpx2

log = logging.getLogger(__name__)

#: Sends again at most this many times.
RETRIES = 5
#: Longest wait for one ``Retry-After``, in seconds.
MAX_WAIT = 30.0
#: Seconds from a request's first send past which it is not sent again (a client that must
#: answer within a deadline passes less: the agent's claim reads for a kubelet's prepare).
BUDGET = 60.0

_counted = threading.Lock()
#: ``Retry-After`` answers waited out, by status code (the process's, for logs and tests).
waited: dict[int, int] = {}


def retry_after(response: httpx2.Response) -> float | None:
    """The seconds ``response`` asks to wait before sending again; None: not to be resent."""
    code = response.status_code
    if code != 429 and not 500 <= code <= 599:
        return None
    header = response.headers.get("Retry-After", "").strip()
    if not header.isdigit():
        return None  # absent, or an HTTP date (kube-apiserver sends seconds)
    return min(max(float(header), 1.0), MAX_WAIT)


class RetryAfterTransport(httpx2.BaseTransport):
    """Wraps ``inner``: a request answered with ``Retry-After`` is sent again after that wait."""

    def __init__(
        self,
        inner: httpx2.BaseTransport,
        *,
        retries: int = RETRIES,
        budget: float = BUDGET,
        jitter: float = 0.5,
    ) -> None:
        self.inner = inner
        self.retries = retries
        self.budget = budget
        self.jitter = jitter

    def handle_request(self, request: httpx2.Request) -> httpx2.Response:
        replayable = isinstance(request.stream, httpx2.ByteStream)
        start = time.monotonic()
        for attempt in range(self.retries + 1):
            response = self.inner.handle_request(request)
            wait = retry_after(response)
            if wait is None or not replayable or attempt == self.retries:
                return response
            delay = wait * (1.0 + random.uniform(0.0, self.jitter))
            if time.monotonic() + delay - start > self.budget:
                return response  # the caller's deadline comes first (a kubelet's prepare)
            response.read()  # the connection goes back to the pool
            response.close()
            with _counted:
                waited[response.status_code] = waited.get(response.status_code, 0) + 1
            log.warning(
                "API server answered %d to %s %s; Retry-After %.0f s, sending again in %.1f s",
                response.status_code,
                request.method,
                request.url.path,
                wait,
                delay,
            )
            time.sleep(delay)
        raise AssertionError("unreachable")

    def close(self) -> None:
        self.inner.close()
