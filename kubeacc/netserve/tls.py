"""Mutual TLS for a server port: its certificate, and the CA whose clients alone may talk.

The files are those of a Kubernetes Secret mounted as a volume; when the kubelet swaps them
(a renewed certificate), the next connection gets a context built from the new files.
"""

from __future__ import annotations

import logging
import os
import ssl
import threading
import time
from dataclasses import dataclass
from pathlib import Path

log = logging.getLogger(__name__)

#: Seconds between looks at the files' modification times.
RECHECK = 10.0


class TLSConfigError(ValueError):
    """The certificate, key or CA cannot be used (the message says which and why)."""


@dataclass(frozen=True)
class TLSFiles:
    cert: Path
    key: Path
    client_ca: Path

    def stamp(self) -> tuple[int, ...]:
        return tuple(os.stat(p).st_mtime_ns for p in (self.cert, self.key, self.client_ca))


def server_context(files: TLSFiles) -> ssl.SSLContext:
    """TLS 1.2 or later, HTTP/1.1 only, and a client certificate signed by ``client_ca``."""
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    ctx.minimum_version = ssl.TLSVersion.TLSv1_2
    ctx.set_alpn_protocols(["http/1.1"])
    try:
        ctx.load_cert_chain(files.cert, files.key)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"certificate {files.cert} / key {files.key}: {err}") from None
    try:
        ctx.load_verify_locations(cafile=files.client_ca)
    except (OSError, ssl.SSLError) as err:
        raise TLSConfigError(f"client CA {files.client_ca}: {err}") from None
    ctx.verify_mode = ssl.CERT_REQUIRED
    return ctx


class ReloadingContext:
    """A callable that answers the current context, rebuilt when the files change."""

    def __init__(self, files: TLSFiles) -> None:
        self.files = files
        self._ctx = server_context(files)
        self._stamp = files.stamp()
        self._checked = time.monotonic()
        self._lock = threading.Lock()

    def __call__(self) -> ssl.SSLContext:
        now = time.monotonic()
        if now - self._checked < RECHECK:
            return self._ctx
        with self._lock:
            self._checked = now
            try:
                stamp = self.files.stamp()
                if stamp != self._stamp:
                    self._ctx = server_context(self.files)
                    self._stamp = stamp
                    log.info("TLS certificate reloaded from %s", self.files.cert)
            except (OSError, TLSConfigError) as err:  # mid-swap: keep the old one, retry
                log.warning("TLS certificate not reloaded (keeping the previous one): %s", err)
            return self._ctx
