"""The bounds of one HTTP port: connections, the phases' deadlines, head and body sizes."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Limits:
    """What one port allows a client. Times are seconds, sizes bytes.

    A connection lives in phases, each with its own deadline (enforced by the server's reaper,
    whatever the client does): the TLS handshake; waiting for the next request
    (``keepalive_timeout``); the request head, from its first byte (``head_timeout``); the
    body (``body_timeout``); the work and the answer (``work_timeout``).
    """

    #: Connections served at once; more are closed at accept.
    max_connections: int = 32
    #: The listen backlog (connections the kernel queues before accept).
    backlog: int = 128
    handshake_timeout: float = 5.0
    keepalive_timeout: float = 15.0
    head_timeout: float = 5.0
    body_timeout: float = 10.0
    work_timeout: float = 60.0
    #: Request line plus headers.
    max_head: int = 16 << 10
    #: A request body; 0: the port takes none.
    max_body: int = 0


#: The metrics and probe ports: GETs only, a few scrapers and the kubelet.
PROBE_LIMITS = Limits(max_connections=16, keepalive_timeout=15.0, work_timeout=30.0)
