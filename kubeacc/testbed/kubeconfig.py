"""Kubeconfig files and an HTTPS probe that authenticates like they do."""

from __future__ import annotations

import json
import ssl
import urllib.request
from pathlib import Path
from typing import Any

import yaml

from kubeacc.testbed.certs import CertPair


def write_kubeconfig(path: Path, server: str, ca: Path, client: CertPair, user: str) -> Path:
    """Write a single-context kubeconfig that authenticates with a client certificate."""
    doc = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [
            {"name": "testbed", "cluster": {"server": server, "certificate-authority": str(ca)}}
        ],
        "users": [
            {
                "name": user,
                "user": {"client-certificate": str(client.cert), "client-key": str(client.key)},
            }
        ],
        "contexts": [{"name": "testbed", "context": {"cluster": "testbed", "user": user}}],
        "current-context": "testbed",
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    path.chmod(0o600)
    return path


def https_ok(url: str, ca: Path | None, client: CertPair | None = None, timeout: float = 2) -> bool:
    """True when GET ``url`` answers 200 (certificate checks on when ``ca`` is given)."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
        return int(resp.status) == 200


def https_get_json(url: str, ca: Path | None, client: CertPair | None, timeout: float = 5) -> Any:
    """GET ``url`` with a client certificate and decode the JSON body."""
    ctx = ssl.create_default_context(cafile=str(ca)) if ca else ssl._create_unverified_context()
    if client is not None:
        ctx.load_cert_chain(str(client.cert), str(client.key))
    with urllib.request.urlopen(url, context=ctx, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_ok(url: str, timeout: float = 2) -> bool:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return int(resp.status) == 200
