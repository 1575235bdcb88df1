"""kube-acc installed in-process on a testbed: what ``kubeacc demo`` runs and what the tests of
the examples run against.

Cluster-wide: the CRDs, the driver's DeviceClasses and the controller. On every node that has a
kubelet: the node agent (ResourceSlices, the kubelet DRA plugin, FPGA programming for claims)
and the life-cycle agent (Accelerator inventory, operations), both reading that node's
synthetic host tree, with the synthetic FPGA bitstream library and the synthetic kernel at the
ioctl/sysfs boundary. Every component is the same class ``kubeacc agent``,
``kubeacc lifecycle-agent`` and ``kubeacc controller`` run; only the process is shared.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from kubeacc.controller.operations import ANY_NAMESPACE
from kubeacc.synthetic import profiles

if TYPE_CHECKING:
    from lightkube import Client

    from kubeacc.agent.dra.sharing.limits import ShareSelector
    from kubeacc.agent.runner import Agent
    from kubeacc.deviceplugin.config import DevicePluginConfig
    from kubeacc.lifecycle.agent import LifecycleAgent
    from kubeacc.testbed import Testbed


@dataclass
class NodeComponents:
    """The kube-acc components of one node."""

    name: str
    host: Path
    agent: Agent
    lifecycle: LifecycleAgent


@dataclass
class KubeaccStack:
    testbed: Testbed
    base: Path
    #: node name -> synthetic host profile, for every node that runs our agents
    host_profiles: dict[str, str]
    #: seconds between the life-cycle agents' discoveries (operations wake them at once)
    interval: float = 1.0
    #: namespaces whose AcceleratorOperations may act on any device (the demo is its cluster's
    #: admin; a chart install allows only its release namespace, others by a policy's grant)
    admin_namespaces: tuple[str, ...] = (ANY_NAMESPACE,)
    #: node name -> the types its agent serves through the kubelet device plugin API (and how);
    #: a node not named serves every type through DRA
    device_plugins: dict[str, DevicePluginConfig] = field(default_factory=dict)
    #: node name -> the GPUs its agent publishes memory-shared (``--memory-shared``)
    memory_shared: dict[str, tuple[ShareSelector, ...]] = field(default_factory=dict)
    nodes: dict[str, NodeComponents] = field(default_factory=dict)
    #: load a claim's FPGA bitstream before its pod is bound (binding conditions) where the
    #: cluster keeps them; False: at prepare (``--no-fpga-binding-conditions``)
    fpga_binding_conditions: bool = True
    #: bitstream library path -> sha256 (the same files on every node)
    bitstreams: dict[str, str] = field(default_factory=dict)
    classes: list[str] = field(default_factory=list)
    _stop: threading.Event = field(default_factory=threading.Event)
    _threads: list[threading.Thread] = field(default_factory=list)

    @property
    def library(self) -> Path:
        return self.base / "bitstreams"

    def cdi_dir(self, name: str) -> Path:
        """Node ``name``'s CDI spec directory: the one its real runtime reads, if it has one."""
        kubelet = self.testbed.node(name)
        return kubelet.cdi_dir if kubelet.containerd is not None else self.base / "cdi" / name

    def client(self, field_manager: str = "kubeacc-demo") -> Client:
        return self.testbed.client(field_manager=field_manager)

    def start(self) -> None:
        """Install the cluster-wide parts, then start every node's agents; on failure stop what
        was started."""
        try:
            self._start()
        except BaseException:
            self.stop()
            raise

    def _start(self) -> None:
        from kubeacc.agent.dra.classes import apply_device_classes
        from kubeacc.controller.controller import Controller
        from kubeacc.crds.resources import install_crds
        from kubeacc.synthetic.bitstreams import write_library

        client = self.client()
        install_crds(client)
        self.classes = apply_device_classes(client)
        self.bitstreams = write_library(self.library)
        controller = Controller(
            self.client("kubeacc-controller"),
            identity="demo",
            interval=0.3,
            resync_seconds=30,
            admin_namespaces=self.admin_namespaces,
        )
        self._run(controller.run, "controller")
        for name, profile in self.host_profiles.items():
            self.nodes[name] = self._start_node(name, profile)
        for node in self.nodes.values():
            node.agent.published.wait(60)

    def _start_node(self, name: str, profile: str) -> NodeComponents:
        from kubeacc.agent.compose import compose_agent
        from kubeacc.agent.dra.publishing import KINDS, Publishing
        from kubeacc.agent.options import (
            AgentOptions,
            ApiOptions,
            NodePaths,
            PrepareOptions,
            PublishOptions,
        )
        from kubeacc.lifecycle.agent import LifecycleAgent
        from kubeacc.node.userspace.provider import UserSpaceMode
        from kubeacc.synthetic.host import SyntheticHost
        from kubeacc.synthetic.kernel import SyntheticKernel

        kubelet = self.testbed.node(name)
        host = profiles.build(profile, self.base / "hosts" / name)
        node = SyntheticHost(host, kernel=SyntheticKernel(host))
        device_root = Path("/")
        if kubelet.containerd is not None:
            # Real containers: the synthetic host's device nodes as real ones for containerd.
            from kubeacc.discovery.discover import discover

            nodes = {n for d in discover(node, nvml="off").devices for n in d.device_nodes}
            kubelet.mknod(sorted(nodes))
            device_root = kubelet.device_root
        plugins = self.device_plugins.get(name)
        agent = compose_agent(
            node,
            AgentOptions(
                node=NodePaths(
                    node_name=name,
                    kubelet_root=kubelet.root_dir,
                    cdi_dir=self.cdi_dir(name),
                    device_root=device_root,
                    state_dir=self.base / "state" / name,
                ),
                api=ApiOptions(kubeconfig=self.testbed.kubeconfig),
                # everything, VFs too: the demo's and the examples' claims ask for one
                publish=PublishOptions(
                    publishing=Publishing.parse(KINDS),
                    device_plugin_types=frozenset(plugins.types if plugins else ()),
                    memory_shared=self.memory_shared.get(name, ()),
                ),
                prepare=PrepareOptions(
                    bitstream_dir=self.library,
                    fpga_binding_conditions=self.fpga_binding_conditions,
                    # a synthetic node has no NVIDIA driver to hand to containers
                    driver_user_space=UserSpaceMode.TOOLKIT,
                ),
            ),
        )
        if plugins is not None:
            from kubeacc.deviceplugin.manager import DevicePluginManager

            agent.add_plugin(
                DevicePluginManager(
                    kubelet.device_plugin_dir,
                    plugins,
                    self.cdi_dir(name),
                    device_root,
                    agent.metrics,
                    None,  # no shared GPUs: no extender decisions to look up
                    agent.limiter,
                    agent.user_space,
                )
            )
        agent.start()
        try:
            lifecycle = LifecycleAgent(
                self.client(f"kubeacc-agent-{name}"),
                node_name=name,
                host=node,
                bitstream_dir=self.library,
                interval=self.interval,
            )
        except BaseException:
            agent.stop()
            raise
        self._run(lifecycle.run, f"lifecycle-{name}")
        return NodeComponents(name, host, agent, lifecycle)

    def _run(self, target: Callable[[threading.Event], None], name: str) -> None:
        t = threading.Thread(target=target, args=(self._stop,), name=name, daemon=True)
        t.start()
        self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(15)
        for node in self.nodes.values():
            node.agent.stop()
