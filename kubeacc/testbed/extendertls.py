"""Certificates for the extender's mutual TLS in the testbed and the benchmarks: one CA, the
extender's serving certificate and kube-scheduler's client certificate (what the chart makes
with genCA/genSignedCert in a cluster)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from kubeacc.netserve.tls import TLSFiles
from kubeacc.testbed.certs import CertificateAuthority, CertPair


@dataclass(frozen=True)
class ExtenderPKI:
    ca: Path
    server: CertPair
    client: CertPair

    @property
    def server_files(self) -> TLSFiles:
        return TLSFiles(self.server.cert, self.server.key, self.ca)


def issue_extender_pki(directory: Path, name: str = "kubeacc-extender") -> ExtenderPKI:
    ca = CertificateAuthority(directory, name=f"{name}-ca")
    server = ca.issue(
        "extender", name, dns_names=(name, "localhost"), ip_addresses=("127.0.0.1",), server=True
    )
    client = ca.issue("scheduler", "kube-scheduler", client=True)
    return ExtenderPKI(ca.cert_path, server, client)
