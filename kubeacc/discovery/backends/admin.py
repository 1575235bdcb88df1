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

import re
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from kubeacc.discovery.context import DiscoveryContext
from kubeacc.model import Device, DeviceType, Health, HealthState

_HEX4 = re.compile(r"^(0x)?[0-9a-fA-F]{4}$")


class ConfigError(ValueError):
    """The discovery config file is unreadable or invalid; the message says where and why."""


def _hex_id(value: str) -> str:
    if not _HEX4.match(value):
        raise ValueError(f"expected a 4-digit hex PCI id such as 0x10de, got {value!r}")
    return "0x" + value.lower().removeprefix("0x")


class AdminDevice(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    vendor: str
    device: str | None = None
    type: DeviceType
    model: str | None = None
    device_nodes: list[str] = Field(default_factory=list, alias="deviceNodes")

    @field_validator("vendor", "device")
    @classmethod
    def _check_id(cls, value: str | None) -> str | None:
        return None if value is None else _hex_id(value)


class DiscoveryConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    api_version: Literal["kubeacc.io/v1alpha1"] = Field(
        default="kubeacc.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["DiscoveryConfig"] = "DiscoveryConfig"
    devices: list[AdminDevice] = Field(default_factory=list)


def load_config(path: str | Path) -> DiscoveryConfig:
    try:
        data = yaml.safe_load(Path(path).read_text(encoding="utf-8"))
    except OSError as err:
        raise ConfigError(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise ConfigError(f"{path}: not valid YAML: {err}") from err
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
