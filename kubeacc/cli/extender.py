"""``kubeacc extender``: the kube-scheduler extender (filter, prioritize, bind over HTTP)."""

from __future__ import annotations

import os
import socket
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from kubeacc.cli.declare import option
from kubeacc.cli.errors import fail
from kubeacc.cli.logs import LogLevel, LogLevelOption, setup_logging
from kubeacc.cli.options import (
    ContextOption,
    KubeconfigOption,
    UnitsTableOption,
    use_units_table,
)
from kubeacc.cli.signals import stop_on_signals

if TYPE_CHECKING:
    from kubeacc.netserve.tls import ReloadingContext


def _address(text: str) -> tuple[str, int]:
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        fail(f"--address must be HOST:PORT or :PORT, not {text!r}")
    return host or "0.0.0.0", int(port)


def extender_command(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    address: Annotated[
        str, option(help="Serve the verbs, /healthz and /readyz on HOST:PORT or :PORT.")
    ] = ":8888",
    leader_elect: Annotated[
        bool, option(help="Serve only while holding the Lease kubeacc-extender.")
    ] = True,
    identity: Annotated[str | None, option(help="Leader-election identity.")] = None,
    lease_namespace: Annotated[str, option(help="Namespace of the Lease.")] = "kube-system",
    lease_duration: Annotated[
        int, option(min=2, help="Seconds a Lease holds without renewal.")
    ] = 15,
    tls_cert_file: Annotated[
        Path | None, option(dir_okay=False, help="The port's TLS certificate (PEM).")
    ] = None,
    tls_key_file: Annotated[
        Path | None, option(dir_okay=False, help="Its private key (PEM).")
    ] = None,
    client_ca_file: Annotated[
        Path | None,
        option(
            dir_okay=False,
            help="CA whose client certificates alone may call the port (kube-scheduler's).",
        ),
    ] = None,
    insecure_http: Annotated[
        bool,
        option(
            help="Serve plain HTTP without client authentication: anyone who reaches the "
            "port can bind any pod. For a local test cluster only."
        ),
    ] = False,
    probe_address: Annotated[
        str | None,
        option(help="Also serve /healthz, /readyz and /metrics in plain HTTP here."),
    ] = None,
    units_table: UnitsTableOption = None,
    log_level: LogLevelOption = LogLevel.INFO,
) -> None:
    """Run the scheduler extender: GPU placement and memory sharing for device-plugin clusters.

    kube-scheduler calls it through a KubeSchedulerConfiguration `extenders` entry: urlPrefix
    here, verbs filter, prioritize and bind, nodeCacheCapable true (docs/extender.md).
    The port speaks TLS and takes only clients with a certificate signed by --client-ca-file;
    --insecure-http instead is for local use only.
    """
    from kubeacc.clientconfig import make_client
    from kubeacc.extender.kube import FIELD_MANAGER
    from kubeacc.extender.runner import ExtenderRunner, check_api
    from kubeacc.metrics.http import MetricsAddressError

    host, port = _address(address)
    use_units_table(units_table)
    tls = _tls(tls_cert_file, tls_key_file, client_ca_file, insecure_http)
    setup_logging(log_level)
    client = make_client(kubeconfig, FIELD_MANAGER, timeout=30, context=context)
    check_api(client)
    who = identity or f"{socket.gethostname()}-{os.getpid()}"
    try:
        runner = ExtenderRunner(
            client,
            host,
            port,
            identity=who,
            lease_namespace=lease_namespace,
            leader_elect=leader_elect,
            lease_duration=lease_duration,
            tls=tls,
            probe_address=probe_address,
        )
    except MetricsAddressError as err:
        fail(str(err), code=1)
    except OSError as err:
        fail(f"cannot listen on {address}: {err.strerror or err}", code=1)
    stop = stop_on_signals()
    runner.run(stop)


def _tls(
    cert: Path | None, key: Path | None, client_ca: Path | None, insecure: bool
) -> ReloadingContext | None:
    from kubeacc.netserve.tls import ReloadingContext, TLSConfigError, TLSFiles

    given = [p for p in (cert, key, client_ca) if p is not None]
    if insecure:
        if given:
            fail("--insecure-http and the TLS files exclude each other")
        return None
    if cert is None or key is None or client_ca is None:
        fail(
            "the extender's port needs --tls-cert-file, --tls-key-file and --client-ca-file "
            "(kube-scheduler's client CA); --insecure-http serves plain HTTP for local use"
        )
    try:
        return ReloadingContext(TLSFiles(cert, key, client_ca))
    except (OSError, TLSConfigError) as err:
        fail(str(err))
