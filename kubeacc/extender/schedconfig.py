"""The KubeSchedulerConfiguration ``extenders`` entry that points kube-scheduler at
``kubeacc extender`` (docs/extender.md, "Scheduler configuration")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubeacc.contracts.wants import CORES, GPU, MEMORY, UNITS

#: The resources whose pods kube-scheduler sends to the extender.
MANAGED_RESOURCES = (MEMORY, CORES, UNITS, GPU)


@dataclass(frozen=True)
class SchedulerTLS:
    """kube-scheduler's side of the extender's mutual TLS: its client certificate and key,
    and the CA that signed the extender's serving certificate."""

    cert: Path
    key: Path
    ca: Path
    server_name: str = ""


def scheduler_entry(
    url_prefix: str,
    managed: Sequence[str] = MANAGED_RESOURCES,
    *,
    weight: int = 1,
    timeout: str = "10s",
    tls: SchedulerTLS | None = None,
) -> dict[str, Any]:
    """``tls``: call the extender over HTTPS with a client certificate (``url_prefix`` must
    then be ``https://``); the extender accepts nothing else unless run with
    ``--insecure-http``."""
    entry: dict[str, Any] = {
        "urlPrefix": url_prefix,
        "filterVerb": "filter",
        "prioritizeVerb": "prioritize",
        "bindVerb": "bind",
        "weight": weight,
        "nodeCacheCapable": True,
        "httpTimeout": timeout,
        "managedResources": [{"name": r} for r in managed],
    }
    if tls is not None:
        entry["enableHTTPS"] = True
        entry["tlsConfig"] = {
            "certFile": str(tls.cert),
            "keyFile": str(tls.key),
            "caFile": str(tls.ca),
            **({"serverName": tls.server_name} if tls.server_name else {}),
        }
    return entry
