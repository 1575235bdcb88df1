"""Options that several commands share, so each is spelled and documented once."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

from kubeacc.cli.declare import option

KubeconfigOption = Annotated[
    Path | None,
    option(
        "--kubeconfig",
        exists=True,
        dir_okay=False,
        help="Kubeconfig file (default: $KUBECONFIG, then the pod's service account, "
        "then ~/.kube/config).",
    ),
]
ContextOption = Annotated[
    str | None,
    option("--context", help="Kubeconfig context to use (default: its current-context)."),
]
#: Every daemon's probe and metrics port, off unless given.
MetricsAddressOption = Annotated[
    str | None,
    option(
        "--metrics-address",
        help="Serve /metrics, /healthz, /readyz on HOST:PORT or :PORT (default: off).",
    ),
]
NamespaceOption = Annotated[
    str | None,
    option("--namespace", "-n", help="Only this namespace."),
]
AllNamespacesOption = Annotated[
    bool,
    option("--all-namespaces", "-A", help="Every namespace (the default)."),
]
HostRootOption = Annotated[
    Path, option("--host-root", help="Root of the host's /sys, /dev and /proc.")
]
DeviceRootOption = Annotated[
    Path,
    option(
        "--device-root",
        help="Where the container runtime finds the device nodes (the /dev paths handed to "
        "containers and written to CDI specs as hostPath): / on a real node.",
    ),
]
UnitsTableOption = Annotated[
    Path | None,
    option(
        "--units-table",
        dir_okay=False,
        help="Model -> normalized units (a UnitTable YAML, or a ConfigMap with units.yaml); "
        "default: the built-in table (docs/extender.md, 'Normalized units').",
    ),
]


def use_units_table(path: Path | None) -> None:
    """Load ``--units-table`` into this process (one-line error and exit 2 when it is bad)."""
    if path is None:
        return
    from kubeacc.cli.errors import fail
    from kubeacc.units.table import UnitTableError, load, use_table

    try:
        use_table(load(path))
    except UnitTableError as err:
        fail(str(err))


def namespace_scope(namespace: str | None, all_namespaces: bool) -> str | None:
    """The one namespace ``-n`` names, or None for every namespace (``-A``, the default for
    commands that look at devices, which the whole cluster shares); both at once is exit 2."""
    if namespace is not None and all_namespaces:
        from kubeacc.cli.errors import fail

        fail("give -n/--namespace or -A/--all-namespaces, not both")
    return namespace


class Inventory(StrEnum):
    """Where a node daemon's devices come from (``--inventory``)."""

    HOST = "host"
    CYBORG = "cyborg"
