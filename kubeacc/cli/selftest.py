"""``kubeacc selftest``: the hardware conformance kit (docs/selftest.md). Checks a node's GPUs,
driver user space and kube-acc's CDI specs against the host, runs a CUDA smoke program in a
container through the runtime, and (when asked) MIG, MPS and the time slice; prints a report
to attach to a bug (exit 1 when a check fails)."""

from __future__ import annotations

from enum import StrEnum
from pathlib import Path
from typing import Annotated

import typer

from kubeacc.cli.hosts import HostKind, HostKindOption, open_host
from kubeacc.cli.options import DeviceRootOption, HostRootOption
from kubeacc.cli.typerize import typer_command


class ReportFormat(StrEnum):
    TEXT = "text"
    JSON = "json"


@typer_command
def selftest_command(
    host_root: HostRootOption = Path("/"),
    host_kind: HostKindOption = HostKind.AUTO,
    driver_root: Annotated[
        str, typer.Option(help="The NVIDIA driver root, a host path (as the agent's).")
    ] = "/",
    runtime_driver_root: Annotated[
        Path | None,
        typer.Option(help="The driver root as the container runtime sees it (as the agent's)."),
    ] = None,
    cdi_dir: Annotated[Path, typer.Option(help="Where the agent writes CDI specs.")] = Path(
        "/var/run/cdi"
    ),
    cdi_hook: Annotated[
        Path,
        typer.Option(help="kube-acc's CDI hook, a host path (the agent copies it there)."),
    ] = Path("/var/lib/kubeacc/native/kubeacc-cdi-hook"),
    device_root: DeviceRootOption = Path("/"),
    ctr: Annotated[Path, typer.Option(help="containerd's client, ctr.")] = Path("/usr/bin/ctr"),
    containerd_address: Annotated[Path, typer.Option(help="containerd's socket.")] = Path(
        "/run/containerd/containerd.sock"
    ),
    containerd_namespace: Annotated[
        str, typer.Option(help="containerd namespace of the smoke image.")
    ] = "k8s.io",
    runtime_cdi_dir: Annotated[
        Path,
        typer.Option(help="A CDI directory ctr reads (/etc/cdi or /var/run/cdi)."),
    ] = Path("/var/run/cdi"),
    smoke_image: Annotated[
        str | None,
        typer.Option(
            help="Image for the CUDA smoke container (has a C library and ldconfig; pulled "
            "already). Without it the smoke check is skipped."
        ),
    ] = None,
    smoke_program: Annotated[
        Path, typer.Option(help="The smoke program, a host path (kubeacc-cuda-smoke).")
    ] = Path("/opt/kubeacc/native/kubeacc-cuda-smoke"),
    smoke_timeout: Annotated[float, typer.Option(help="Seconds the smoke container may run.")] = (
        120.0
    ),
    sharelimit_library: Annotated[
        Path,
        typer.Option(
            help="The share-limit library, a host path (the agent copies it there); the "
            "memory-share check is skipped without it."
        ),
    ] = Path("/var/lib/kubeacc/native/libkubeacc-sharelimit.so"),
    smoke_env: Annotated[
        list[str] | None,
        typer.Option(help="NAME=VALUE: extra environment of the smoke containers (repeatable)."),
    ] = None,
    mig: Annotated[
        bool, typer.Option("--mig", help="Create and destroy a MIG instance on a free MIG GPU.")
    ] = False,
    mps: Annotated[
        bool, typer.Option("--mps", help="Start and stop an MPS control daemon on one GPU.")
    ] = False,
    timeslice: Annotated[
        bool, typer.Option("--timeslice", help="Set one GPU's time slice and restore it.")
    ] = False,
    output: Annotated[
        ReportFormat, typer.Option("--output", "-o", help="text or json.")
    ] = ReportFormat.TEXT,
) -> None:
    """Check this node's GPUs, driver user space and CDI specs; print a report."""
    from kubeacc.node.userspace.hook import IMAGE_LDCONFIG
    from kubeacc.node.userspace.nvidia import DriverRootError, module_version
    from kubeacc.node.userspace.provider import DriverUserSpace
    from kubeacc.selftest.discovery import discovery_checks, nvidia_gpus
    from kubeacc.selftest.gpuops import mig_check, mps_check, timeslice_check
    from kubeacc.selftest.prepare import prepare_checks
    from kubeacc.selftest.report import Report, node_facts, skipped
    from kubeacc.selftest.smoke import Runtime, smoke_check
    from kubeacc.selftest.userspace import spec_checks, user_space_checks

    env = _env_pairs(smoke_env or [])  # refused before any check runs
    host = open_host(host_root, host_kind)
    try:
        driver: str | None = module_version(host.files())
    except DriverRootError:
        driver = None
    hook = cdi_hook if cdi_hook.is_file() else None
    ldconfig = cdi_hook.parent / IMAGE_LDCONFIG.name
    us = DriverUserSpace(
        host,
        driver_root,
        hook,
        runtime_root=runtime_driver_root,
        ldconfig=ldconfig if hook and ldconfig.is_file() else None,
    )
    gpus = nvidia_gpus(host, "off")
    report = Report(node_facts(host, driver))
    report.checks += discovery_checks(host, gpus)  # the files view, discovered once
    if gpus or driver:
        checks, version = user_space_checks(us)
        report.checks += checks
    else:
        version = None
        report.checks.append(skipped("NVIDIA driver user space", "no NVIDIA GPU on this node"))
    report.checks += spec_checks(cdi_dir, version or driver)
    runtime = Runtime(
        ctr,
        containerd_address,
        smoke_image,
        smoke_program,
        runtime_cdi_dir,
        containerd_namespace,
        device_root,
        smoke_timeout,
        env,
    )
    report.checks.append(smoke_check(runtime, us, gpus[0] if gpus else None))
    report.checks += prepare_checks(runtime, us, host, sharelimit_library)
    report.checks.append(mig_check(host, gpus, mig))
    report.checks.append(mps_check(host, gpus, mps))
    report.checks.append(timeslice_check(host, gpus, timeslice))
    typer.echo(report.as_json() if output is ReportFormat.JSON else report.text())
    raise typer.Exit(0 if report.ok else 1)


def _env_pairs(pairs: list[str]) -> tuple[str, ...]:
    for pair in pairs:
        name, eq, _ = pair.partition("=")
        if not eq or not name or not name.replace("_", "a").isalnum() or name[0].isdigit():
            raise typer.BadParameter(f"not NAME=VALUE: {pair!r}", param_hint="--smoke-env")
    return tuple(pairs)
