"""Admin-defined devices: a config file maps PCI vendor[:device] ids to a type and model.

Example (YAML)::

    apiVersion: kubeacc.io/v1alpha1
    kind: DiscoveryConfig
    devices:
      - vendor: "0x1e52"          # required
        device: "0x0001"          # optional: every device of the vendor when left out
        type: accelerator         # gpu | fpga | nic | xpu | accelerator
        model: Example X1         # optional: pci.ids name otherwise
        deviceNodes: ["/dev/ex{index}"]   # {index}: position among the matches, {bdf}

Admin entries run before every built-in backend, so they can also re-type a known device.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.model import Device, Health, HealthState

if TYPE_CHECKING:
    from kubeacc.discovery.backends.adminconfig import DiscoveryConfig


class ConfigError(ValueError):
    """The discovery config file is unreadable or invalid; the message says where and why."""


def load_config(path: str | Path) -> DiscoveryConfig:
    import yaml  # only a node with an admin discovery file reads YAML

    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
    from pydantic import ValidationError

    from kubeacc.discovery.backends.adminconfig import DiscoveryConfig

    if data is None:
        return DiscoveryConfig()
    if not isinstance(data, dict):
        raise ConfigError(f"{path}: expected a mapping with 'devices'")
    try:
        return DiscoveryConfig.model_validate(data)
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg']}" for e in err.errors()
        )
        raise ConfigError(f"{path}: {problems}") from err


class AdminBackend:
    name = "admin"

    def __init__(self, config: DiscoveryConfig):
        self.config = config

    def discover(self, ctx: DiscoveryContext) -> list[Device]:
        found = []
        for entry in self.config.devices:
            matches = [
                fn
                for fn in ctx.unclaimed()
                if fn.vendor == entry.vendor
                and (entry.device is None or fn.device == entry.device)
                and fn.physfn is None
            ]
            for index, fn in enumerate(matches):
                name = ctx.claim(fn, entry.type)
                dev = ctx.pci_device(fn, entry.type, name, source="admin", model=entry.model)
                nodes = [n.format(index=index, bdf=fn.bdf) for n in entry.device_nodes]
                dev.device_nodes = ctx.dev_nodes(*nodes, device=name)
                if fn.driver is None:
                    dev.health = Health(
                        state=HealthState.UNHEALTHY, reason="no kernel driver bound"
                    )
                elif len(dev.device_nodes) < len(nodes):
                    dev.health = Health(state=HealthState.UNHEALTHY, reason="device node missing")
                found.append(dev)
        return found
