"""A bare HTTP/2 client for what a gRPC library would never send: a declared message length
with no body behind it, and a look at the server's SETTINGS."""

from __future__ import annotations

import socket
import struct
from dataclasses import dataclass, field
from pathlib import Path

import h2.config
import h2.connection
import h2.events


@dataclass
class Probe:
    settings: dict[int, int] = field(default_factory=dict)
    trailers: dict[str, str] = field(default_factory=dict)
    reset: bool = False


def declare_message(sock_path: Path, method: str, length: int, timeout: float = 10) -> Probe:
    """Start a call on ``method`` (``/pkg.Service/Method``) whose message prefix declares
    ``length`` bytes, send nothing more, and return how the server answered."""
    conn = h2.connection.H2Connection(h2.config.H2Configuration(client_side=True))
    conn.initiate_connection()
    stream = conn.get_next_available_stream_id()
    conn.send_headers(
        stream,
        [
            (":method", "POST"),
            (":scheme", "http"),
            (":path", method),
            (":authority", "localhost"),
            ("content-type", "application/grpc"),
            ("te", "trailers"),
        ],
    )
    conn.send_data(stream, struct.pack(">?I", False, length))
    probe = Probe()
    with socket.socket(socket.AF_UNIX) as sock:
        sock.settimeout(timeout)
        sock.connect(str(sock_path))
        sock.sendall(conn.data_to_send())
        while not probe.trailers and not probe.reset:
            data = sock.recv(65536)
            if not data:
                break
            for event in conn.receive_data(data):
                if isinstance(event, h2.events.RemoteSettingsChanged):
                    probe.settings.update(
                        {k: v.new_value for k, v in event.changed_settings.items()}
                    )
                elif isinstance(event, h2.events.TrailersReceived | h2.events.ResponseReceived):
                    headers = {
                        (k.decode() if isinstance(k, bytes) else k): (
                            v.decode() if isinstance(v, bytes) else v
                        )
                        for k, v in event.headers
                    }
                    if "grpc-status" in headers:
                        probe.trailers = headers
                elif isinstance(event, h2.events.StreamReset):
                    probe.reset = True
            sock.sendall(conn.data_to_send())
    return probe
