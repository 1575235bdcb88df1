"""``kubeacc top``: per-device utilisation and users, from the agents' metrics endpoints.

The agents serve their device telemetry on ``/metrics`` (docs/install.md, "Device telemetry").
The command reaches them the way a user's kubeconfig can: through the API server's pod proxy
(``/api/v1/namespaces/NS/pods/POD:PORT/proxy/metrics``) for the agent pods of the chart
(label ``app.kubernetes.io/name=kubeacc-agent``), or, with ``--endpoint``, straight at the
URLs given (a port-forward, an agent run by hand). ``--node`` keeps one node's devices.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from kubeacc.cli.errors import fail
from kubeacc.cli.options import ContextOption, KubeconfigOption
from kubeacc.cli.output import Format, OutputOption, dump, print_table
from kubeacc.cli.typerize import typer_command
from kubeacc.metrics.devices import DeviceRow, parse

AGENT_NAME_LABEL = "app.kubernetes.io/name"
AGENT_NAME = "kubeacc-agent"
#: A scrape of one agent is a few hundred KB at most (devices x holders x figures).
SCRAPE_LIMIT = 16 << 20


def _fetch_endpoint(url: str, timeout: float) -> str:
    import httpx2

    try:
        response = httpx2.get(url, timeout=timeout)
    except httpx2.HTTPError as exc:
        raise OSError(f"{url}: {exc}") from None
    if response.status_code != 200:
        raise OSError(f"{url}: HTTP {response.status_code}")
    return response.text[:SCRAPE_LIMIT]


def _fetch_pods(
    kubeconfig: Path | None,
    context: str | None,
    namespace: str,
    port: int,
    node: str | None,
    timeout: float,
) -> tuple[list[str], list[str]]:
    """The agents' metrics texts through the pod proxy, and the errors of those that failed."""
    from lightkube.resources.core_v1 import Pod

    from kubeacc.clientconfig import make_client

    client = make_client(kubeconfig, context=context, timeout=timeout)
    pods = list(
        client.list(
            Pod,
            namespace=namespace,
            labels={AGENT_NAME_LABEL: AGENT_NAME},
            fields={"spec.nodeName": node} if node else None,
        )
    )
    if not pods:
        where = f" on node {node}" if node else ""
        raise OSError(f"no kube-acc agent pods{where} in namespace {namespace}")
    # lightkube has no call for a proxied GET; its HTTP client carries the kubeconfig's auth.
    http = client._client._client
    texts, errors = [], []
    for pod in pods:
        assert pod.metadata is not None
        name = pod.metadata.name
        path = f"/api/v1/namespaces/{namespace}/pods/{name}:{port}/proxy/metrics"
        try:
            response = http.get(path)
        except Exception as exc:  # one unreachable agent must not hide the others
            errors.append(f"{name}: {exc}")
            continue
        if response.status_code != 200:
            errors.append(f"{name}: HTTP {response.status_code} from the pod proxy")
            continue
        texts.append(response.text[:SCRAPE_LIMIT])
    return texts, errors


def _cells(row: DeviceRow) -> list[str]:
    def pct(v: float | None) -> str:
        return "-" if v is None else f"{100 * v:.0f}%"

    if row.memory_used is not None and row.memory_total:
        memory = f"{row.memory_used / 2**30:.1f}/{row.memory_total / 2**30:.0f}Gi"
    else:
        memory = "-"
    return [
        row.node,
        row.device,
        row.model,
        pct(row.utilization) if row.up else "DOWN",
        memory,
        "-" if row.temperature is None else f"{row.temperature:.0f}C",
        "-" if row.power is None else f"{row.power:.0f}W",
        f"{row.errors:.0f}",
        ", ".join(row.holders) or "<none>",
    ]


@typer_command
def top_command(
    node: Annotated[str | None, typer.Option(help="Only this node's devices.")] = None,
    namespace: Annotated[
        str, typer.Option("--namespace", "-n", help="Namespace of the kube-acc agent pods.")
    ] = "kubeacc-system",
    port: Annotated[int, typer.Option(help="The agents' metrics port.", min=1, max=65535)] = 9460,
    endpoint: Annotated[
        list[str] | None,
        typer.Option(help="Scrape this URL instead of the agent pods (repeatable)."),
    ] = None,
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    timeout: Annotated[float, typer.Option(help="Seconds per request.", min=0.1)] = 10.0,
    output: OutputOption = Format.TABLE,
) -> None:
    """Per-device utilisation, memory, temperature, power, errors and users."""
    errors: list[str] = []
    try:
        if endpoint:
            texts = [_fetch_endpoint(url, timeout) for url in endpoint]
        else:
            texts, errors = _fetch_pods(kubeconfig, context, namespace, port, node, timeout)
        rows = [r for t in texts for r in parse(t) if node is None or r.node == node]
    except (OSError, ValueError) as exc:
        fail(str(exc), code=1)
    for err in errors:
        typer.echo(f"warning: {err}", err=True)
    if output is not Format.TABLE:
        typer.echo(dump({"devices": [vars(r) for r in rows]}, output), nl=False)
        return
    if not rows:
        typer.echo("no device telemetry (is --telemetry-interval 0, or metrics off?)", err=True)
        return
    print_table(
        ["NODE", "DEVICE", "MODEL", "UTIL", "MEMORY", "TEMP", "POWER", "ERRORS", "USERS"],
        [_cells(r) for r in rows],
        wrap=["USERS"],
        optional=["MODEL", "POWER", "TEMP"],
    )
