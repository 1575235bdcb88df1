"""``kubeacc status``: whether kube-acc is healthy on the cluster, check by check.

Every check passes, fails with the fix, or is skipped where it does not apply (docs/cli.md,
"Status"). Exit 1 when any check fails, so scripts and the chart's ``helm test`` can rely on it.
"""

from __future__ import annotations

import sys
from typing import Annotated, Any

import typer
from rich.text import Text

from kubeacc.cli.errors import fail
from kubeacc.cli.options import ContextOption, KubeconfigOption
from kubeacc.cli.output import Format, OutputOption, dump, is_table, print_table
from kubeacc.cli.typerize import typer_command
from kubeacc.status.model import Check, Result, failed

DEFAULT_NAMESPACE = "kubeacc-system"
_STYLE = {Result.PASS: "green", Result.FAIL: "bold red", Result.SKIP: "yellow"}


def run_checks(
    client: Any, namespace: str, node: str | None, extender_url: str | None, ca: str | None
) -> list[Check]:
    from lightkube import ApiError
    from lightkube.resources.core_v1 import Node, Pod
    from lightkube.resources.resource_v1 import ResourceSlice

    from kubeacc.crds.resources import as_dict
    from kubeacc.status import cluster, nodes

    if node is not None:
        try:
            node_objs = [as_dict(client.get(Node, node))]
        except ApiError as exc:
            if exc.status.code == 404:
                fail(f"no node {node!r} in this cluster", code=1)
            raise
    else:
        node_objs = [as_dict(n) for n in client.list(Node)]
    slices = [as_dict(s) for s in client.list(ResourceSlice)]
    pods = [as_dict(p) for p in client.list(Pod, namespace=namespace, labels=nodes.AGENT_SELECTOR)]
    views = nodes.views(node_objs, slices, pods)
    wanted = [v for v in views.values() if node is not None or nodes.relevant(v)]
    checks = cluster.api_server(client)
    # the gates probe is a dry run in some node's pool; any name does when there is none
    names = [v.name for v in wanted] or [n["metadata"]["name"] for n in node_objs]
    probe_node = names[0] if names else "kubeacc-status"
    checks.append(cluster.dra_gates(client, probe_node))
    checks += cluster.crds(client)
    checks.append(cluster.controller(client, namespace))
    if extender_url:
        checks.append(cluster.extender(extender_url, ca))
    if not wanted:
        checks.append(
            failed(
                "nodes",
                "cluster",
                "no node has a kube-acc agent, its labels or its slices",
                f"install the chart (docs/install.md), or check -n (now {namespace})",
            )
        )
    for view in sorted(wanted, key=lambda v: v.name):
        checks += nodes.check_node(view, namespace, bool(pods))
    return checks


@typer_command
def status_command(
    kubeconfig: KubeconfigOption = None,
    context: ContextOption = None,
    namespace: Annotated[
        str,
        typer.Option(
            "--namespace", "-n", help="Where kube-acc is installed (the Helm release namespace)."
        ),
    ] = DEFAULT_NAMESPACE,
    node: Annotated[
        str | None, typer.Option("--node", help="Only this node's checks (and the cluster's).")
    ] = None,
    extender: Annotated[
        str | None,
        typer.Option(
            "--extender",
            help="Also check the scheduler extender: its base URL, e.g. "
            "http://kubeacc-extender.kubeacc-system.svc:8889 (its /healthz is fetched).",
        ),
    ] = None,
    extender_ca: Annotated[
        str | None,
        typer.Option("--extender-ca", help="CA file for an https --extender URL."),
    ] = None,
    output: OutputOption = Format.TABLE,
) -> None:
    """Check that kube-acc is healthy: versions and gates, CRDs, controller, agents, devices."""
    from kubeacc.clientconfig import make_client

    if extender is not None and not extender.startswith(("http://", "https://")):
        fail(f"--extender must be an http:// or https:// URL, not {extender!r}")
    import httpx2

    client = make_client(kubeconfig, context=context, timeout=15)
    try:
        checks = run_checks(client, namespace, node, extender, extender_ca)
    except httpx2.HTTPStatusError as exc:  # /version or API discovery refused
        from lightkube import ApiError

        if isinstance(exc, ApiError):  # a resource request: errors.describe says it best
            raise
        code = exc.response.status_code
        fail(f"the API server answered {code} to GET {exc.request.url.path}", code=1)
    bad = [c for c in checks if c.failed]
    if is_table(output):
        wide = output is Format.WIDE
        columns = ("CHECK", "SCOPE", "RESULT", "DETAIL", *(("FIX",) if wide else ()))
        rows = [
            [
                c.name,
                c.scope,
                Text(c.result.value.upper(), style=_STYLE[c.result]),
                c.detail,
                *((c.fix or "-",) if wide else ()),
            ]
            for c in checks
        ]
        print_table(columns, rows, wrap=("DETAIL", "FIX"), wide=wide)
        if bad and not wide:
            typer.echo("\nTo fix:")
            for c in bad:
                typer.echo(f"  {c.name} ({c.scope}): {c.fix}")
        typer.echo(
            f"\n{len(bad)} of {len(checks)} checks failed"
            if bad
            else f"\nall {len(checks)} checks passed or skipped"
        )
    else:
        sys.stdout.write(dump({"ok": not bad, "checks": [c.to_dict() for c in checks]}, output))
    if bad:
        raise typer.Exit(code=1)
