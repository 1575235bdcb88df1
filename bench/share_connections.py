"""What many connections to the agent's share accounts cost, and what the caps let in.

The accounting service (kubeacc.node.shareaccount) runs in this process as the agent runs it,
with SHARES shares; this process then opens up to ATTEMPTS connections to each share, one
share after the other (a tenant's many processes, then its neighbours'), and says hello on
each. Prints one JSON object: connections admitted and refused in all and per share, the
service's threads, and the resident memory they added (this process's RSS, the sockets' own
client side included, so an upper bound for the agent's side).

    python bench/share_connections.py [SHARES] [ATTEMPTS]
"""

from __future__ import annotations

import json
import os
import resource
import socket
import sys
import tempfile
import threading
from pathlib import Path

from kubeacc.node.shareaccount import (
    HELLO,
    MAX_CONNECTIONS,
    MAX_TOTAL_CONNECTIONS,
    REPLY,
    REQUEST,
    SOCKET_NAME,
    AccountService,
)


def rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def hello(path: Path) -> socket.socket | None:
    sock = socket.socket(socket.AF_UNIX)
    sock.settimeout(10)
    sock.connect(str(path / SOCKET_NAME))
    try:
        sock.sendall(REQUEST.pack(HELLO, 1, 0))
        if len(sock.recv(2 * REPLY.size, socket.MSG_WAITALL)) == 2 * REPLY.size:
            return sock
    except (BrokenPipeError, ConnectionResetError):
        pass
    sock.close()
    return None


def main() -> None:
    shares = int(sys.argv[1]) if len(sys.argv) > 1 else 8
    attempts = int(sys.argv[2]) if len(sys.argv) > 2 else 600
    _soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    with tempfile.TemporaryDirectory() as tmp:
        service = AccountService(Path(os.path.realpath(tmp)) / "acc")
        service.start()
        dirs = [service.open(f"c-bench-{i}", "1024") for i in range(shares)]
        threads0, rss0 = threading.active_count(), rss_kb()
        held: list[socket.socket] = []
        per_share = []
        for d in dirs:
            got = [s for s in (hello(d) for _ in range(attempts)) if s is not None]
            held += got
            per_share.append(len(got))
        threads, rss = threading.active_count() - threads0, rss_kb() - rss0
        for sock in held:
            sock.close()
        service.stop()
    print(
        json.dumps(
            {
                "shares": shares,
                "attempts_per_share": attempts,
                "max_per_share": MAX_CONNECTIONS,
                "max_total": MAX_TOTAL_CONNECTIONS,
                "admitted": len(held),
                "refused": service.refused,
                "admitted_per_share": per_share,
                "service_threads": threads,
                "rss_added_mb": round(rss / 1024, 1),
                "rss_per_connection_kb": round(rss / max(1, len(held)), 1),
            }
        )
    )


if __name__ == "__main__":
    main()
