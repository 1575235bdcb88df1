"""The node agent's composition root: every collaborator built once, from the settings, and
handed to :class:`~kubeacc.agent.runner.Agent` ready-made.

``kubeacc agent`` (:mod:`kubeacc.cli.agent`), the demo and the tests call
:func:`compose_agent` with the host they chose and :class:`~kubeacc.agent.options.AgentOptions`;
nothing below picks a host or reads a setting that is not its own. What is built here: the
API clients, the DRA driver with what it prepares with (MIG partitions, the share-limit
library, the driver's user space, the sharing strategies, FPGA programming, the claim watch,
the status writer, the FPGA binder). The agent builds only what calls back into its own loop
(its watches of slices, Node and policies, the Accelerator sync); collaborators built here
that must reach it go through :class:`Relay`.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from lightkube import Client

from kubeacc.agent.dra.checkpoint import StateError
from kubeacc.agent.dra.claims import READ_TIMEOUT_S, ClaimSource, WatchingClaimSource
from kubeacc.agent.dra.devicestatus import DeviceStatusWriter
from kubeacc.agent.dra.driver import Driver
from kubeacc.agent.dra.kind import DeviceKind
from kubeacc.agent.dra.mig.nvml import nvml_for
from kubeacc.agent.dra.mig.prepare import MigPartitions
from kubeacc.agent.dra.netdata import host_reader
from kubeacc.agent.dra.sharing.applied import AppliedSharing
from kubeacc.agent.options import AgentOptions, PrepareOptions
from kubeacc.agent.parts import AgentParts, Relay
from kubeacc.agent.runner import Agent
from kubeacc.agent.sharerequire import namespace_requirement
from kubeacc.clientconfig import make_client
from kubeacc.host import Host
from kubeacc.metrics.agent import AgentMetrics
from kubeacc.node.shareaccount import AccountService
from kubeacc.node.sharelimit import Limiter, install
from kubeacc.node.userspace.hook import install_hook, install_ldconfig
from kubeacc.node.userspace.provider import DriverUserSpace, UserSpaceMode

if TYPE_CHECKING:
    from pathlib import Path

    from kubeacc.agent.dra.cyborg.backend import CyborgBackend
    from kubeacc.agent.dra.fpga.binding import FpgaBinder
    from kubeacc.agent.fpga_claims import ClaimProgrammer


def compose_agent(
    host: Host,
    options: AgentOptions,
    client: Client | None = None,
    claims: ClaimSource | None = None,
    kinds: Sequence[DeviceKind] = (),
) -> Agent:
    """The node agent for ``host``, every part built; ``client`` and ``claims`` replace the
    ones made from ``options.api`` (tests, the demo); ``kinds``: device kinds beyond the
    built-in ones (kubeacc/agent/dra/kind.py), called after them."""
    node, prepare = options.node, options.prepare
    api = client or make_client(options.api.kubeconfig, context=options.api.context)
    prepare_client = (
        client
        if client is not None
        else make_client(
            options.api.kubeconfig,
            timeout=READ_TIMEOUT_S,
            context=options.api.context,
            # a busy API server's 429s waited out within the prepare's own budget
            wait_budget=2 * READ_TIMEOUT_S,
        )
    )
    relay = Relay()
    metrics = AgentMetrics()
    cyborg = _cyborg(options) if options.cyborg is not None else None
    if cyborg is not None:
        kinds = [*kinds, cyborg.kind]
    watch: WatchingClaimSource | None = None
    if claims is None and node.kubelet_plugin:
        claims = watch = WatchingClaimSource(
            prepare_client, node.node_name, on_change=relay.users_changed
        )
    partitions = MigPartitions(nvml_for(host, options.publish.nvml), node.state_dir, host)
    library = install(prepare.sharelimit_library, node.state_dir)
    accounts = AccountService(node.state_dir / "sharelimit") if library is not None else None
    limiter = Limiter(library, accounts, namespace_requirement(prepare_client))
    user_space = _user_space(host, prepare, node.state_dir)
    programmer = _fpga_programmer(host, prepare, prepare_client)
    binder: FpgaBinder | None = None
    if (
        programmer is not None
        and prepare.fpga_binding_conditions
        and prepare.device_status
        and isinstance(claims, WatchingClaimSource)
    ):
        # Only a node with a bitstream library loads the binder (and its claim patching).
        from kubeacc.agent.dra.fpga.binding import FpgaBinder

        binder = FpgaBinder(
            prepare_client,
            node.node_name,
            programmer.ensure,
            claims=claims,
            counter=metrics.fpga_bindings,
        )
        claims.observers.append(binder.observe)
    driver = Driver(
        node.node_name,
        claims or WatchingClaimSource(prepare_client, node.node_name),
        relay.devices,
        cdi_dir=node.cdi_dir,
        state_dir=node.state_dir,
        device_root=node.device_root,
        fpga=programmer.ensure if programmer is not None else None,
        fpga_verify=programmer.verify if programmer is not None else None,
        compact_after=prepare.compact_after,
        on_change=relay.users_changed,
        metrics=metrics,
        sharing=_applied_sharing(host, node.state_dir),
        partitions=partitions,
        limiter=limiter,
        user_space=user_space,
        kinds=kinds,
    )
    driver.network = host_reader(host)
    driver.device_metadata = prepare.device_metadata
    status = (
        DeviceStatusWriter(prepare_client, node.node_name, claims=watch)
        if node.kubelet_plugin and prepare.device_status
        else None
    )
    parts = AgentParts(
        client=api,
        prepare_client=prepare_client,
        metrics=metrics,
        driver=driver,
        partitions=partitions,
        limiter=limiter,
        user_space=user_space,
        relay=relay,
        claims=watch,
        status=status,
        binder=binder,
        cyborg=cyborg,
    )
    if cyborg is not None:
        cyborg.start()
    return Agent(host, node, options.publish, options.observe, parts)


def _cyborg(options: AgentOptions) -> CyborgBackend:
    """The Cyborg backend of ``--inventory cyborg``; StateError for a bad credentials file or
    events address."""
    from kubeacc.agent.dra.cyborg.backend import CyborgBackend
    from kubeacc.metrics.http import MetricsAddressError, parse_address
    from kubeacc.node.cyborg.client import read_credentials

    assert options.cyborg is not None
    try:
        creds = read_credentials(options.cyborg.credentials)
        address = (
            parse_address(options.cyborg.events_address) if options.cyborg.events_address else None
        )
    except (ValueError, MetricsAddressError) as exc:
        raise StateError(str(exc)) from None
    return CyborgBackend(
        creds,
        options.cyborg.compute_host or options.node.node_name,
        options.node.state_dir,
        address,
        options.cyborg.bind_timeout,
    )


def _fpga_programmer(host: Host, prepare: PrepareOptions, client: Client) -> ClaimProgrammer | None:
    """Programs claims' FPGAs from the node's bitstream library (None: no library)."""
    if prepare.bitstream_dir is None:
        return None
    from kubeacc.agent.fpga_claims import ClaimProgrammer
    from kubeacc.crds.resources import AcceleratorPolicy, as_dict

    def policies() -> list[dict[str, Any]]:
        return [as_dict(p) for p in client.list(AcceleratorPolicy)]

    return ClaimProgrammer(host, prepare.bitstream_dir, policies)


def _applied_sharing(host: Host, state_dir: Path) -> AppliedSharing:
    """GPU sharing strategies applied through the host's NVML and driver tools."""
    from kubeacc.agent.dra.sharing.mps import MpsDaemons
    from kubeacc.agent.dra.sharing.timeslice import GpuControl

    try:
        return AppliedSharing(state_dir, GpuControl(host), MpsDaemons(host, state_dir / "mps"))
    except ValueError as exc:
        raise StateError(str(exc)) from None


def _user_space(host: Host, prepare: PrepareOptions, state_dir: Path) -> DriverUserSpace:
    """The NVIDIA driver user space of the node, checked (and logged) once at start."""
    cdi = prepare.driver_user_space is UserSpaceMode.CDI
    found = DriverUserSpace(
        host,
        prepare.driver_root,
        install_hook(prepare.cdi_hook, state_dir) if cdi else None,
        prepare.runtime_driver_root,
        prepare.driver_user_space,
        install_ldconfig(state_dir) if cdi else None,
    )
    found.check()
    return found
