"""Which device-plugin resources the agent serves, per accelerator type.

Example (YAML)::

    apiVersion: kubeacc.io/v1alpha1
    kind: DevicePluginConfig
    types:
      gpu: {perModel: true}           # kubeacc.io/gpu-<model> only
      nic: {}                         # kubeacc.io/nic (generic, the default)
      fpga: {replicas: 4, strategy: packed}
    # or, with kubeacc extender: gpu: {shared: true}  (kubeacc.io/gpu + gpu-memory + gpu-cores)
    #                            gpu: {shared: true, units: true}  (+ kubeacc.io/gpu-units)
    cdi: false

A type left out is not served through the device plugin (it stays with DRA): per type, a
device is advertised through one mode only. Within the device plugin, a device is advertised
under exactly one resource: the kubelet counts each resource on its own, so a GPU listed under
both ``kubeacc.io/gpu`` and ``kubeacc.io/gpu-<model>`` could go to two pods at once. Hence per
type either ``generic`` (the default) or ``perModel``; asking for both is an error.
"""

from __future__ import annotations

import re
from enum import StrEnum
from pathlib import Path
from typing import Annotated, Any, Literal, TypeVar

import msgspec

from kubeacc.contracts.names import model_slug
from kubeacc.model import Device, DeviceType

DOMAIN = "kubeacc.io"

_T = TypeVar("_T")


class Strategy(StrEnum):
    SPREAD = "spread"
    PACKED = "packed"


class DevicePluginConfigError(ValueError):
    pass


# msgspec Structs, not pydantic models: the device plugin reads this at every start, and a
# node daemon that imports pydantic for it pays ~3 MB and tens of ms (docs/dependencies.md).
# msgspec checks types and bounds when it converts a file; __post_init__ checks the rules
# between fields, on construction as well.
class TypeConfig(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    #: serve kubeacc.io/<type> (default: unless perModel)
    generic: bool | None = None
    #: serve kubeacc.io/<type>-<model> instead
    per_model: bool = False
    #: shares per device
    replicas: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    strategy: Strategy = Strategy.SPREAD
    #: GPUs only: also serve kubeacc.io/gpu-memory (MiB) and kubeacc.io/gpu-cores (percent);
    #: kubeacc extender decides which GPU every container gets
    shared: bool = False
    #: GPUs, with shared: hold each kubeacc.io/gpu-memory share to its limit in the container
    #: with the preloaded share-limit library; false: the limit is advisory (docs/sharing.md)
    enforce: bool = True
    #: GPUs only, with shared: also serve kubeacc.io/gpu-units (normalized units of the unit
    #: table); kubeacc extender picks whole GPUs whose units add up
    units: bool = False

    def __post_init__(self) -> None:
        if self.generic is None:
            self.generic = not self.per_model
        if not 1 <= self.replicas <= 64:
            raise DevicePluginConfigError(f"replicas: {self.replicas} is not in 1..64")
        self.strategy = Strategy(self.strategy)
        if self.generic and self.per_model:
            raise DevicePluginConfigError(
                "generic and perModel both set: every device would be advertised under two "
                "resources (kubeacc.io/<type> and kubeacc.io/<type>-<model>) and could go to "
                "two pods at once; choose one"
            )
        if not self.generic and not self.per_model:
            raise DevicePluginConfigError(
                "generic and perModel both false: the type would serve nothing"
            )
        if self.units and not self.shared:
            raise DevicePluginConfigError(
                "units without shared: kubeacc.io/gpu-units is served through kubeacc "
                "extender's decisions; set shared: true"
            )
        if self.shared and self.replicas > 1:
            raise DevicePluginConfigError("shared and replicas > 1: choose one way of sharing")


class DevicePluginConfig(msgspec.Struct, rename="camel", forbid_unknown_fields=True, kw_only=True):
    api_version: Literal["kubeacc.io/v1alpha1"] = "kubeacc.io/v1alpha1"
    kind: Literal["DevicePluginConfig"] = "DevicePluginConfig"
    types: dict[DeviceType, TypeConfig] = msgspec.field(default_factory=dict)
    #: also hand out CDI device names
    cdi: bool = False

    def __post_init__(self) -> None:
        for t, cfg in self.types.items():
            if cfg.shared and t is not DeviceType.GPU:
                raise DevicePluginConfigError(
                    f"types.{t.value}.shared: only GPUs are shared by memory"
                )

    @classmethod
    def for_types(cls, types: list[DeviceType]) -> DevicePluginConfig:
        return cls(types={t: TypeConfig() for t in types})


_AT = re.compile(r"^(?P<msg>.*?) - at `(?:key` in `)?\$\.?(?P<path>[^`]*)`$", re.DOTALL)


def _convert(data: Any, kind: type[_T], where: str) -> _T:
    try:
        return msgspec.convert(data, kind)
    except msgspec.ValidationError as err:
        m = _AT.match(str(err))
        msg, path = (m["msg"], m["path"]) if m else (str(err), "")
        path = ".".join(p for p in (where, re.sub(r"\[(\d+)\]", r".\1", path)) if p)
        raise DevicePluginConfigError(f"{path}: {msg}" if path else msg) from None


def parse_config(data: Any) -> DevicePluginConfig:
    """The config from decoded YAML/JSON; ``DevicePluginConfigError`` names the field."""
    types = data.get("types") if isinstance(data, dict) else None
    if isinstance(types, dict):  # each type on its own first, so that errors name it
        for key, value in types.items():
            if key not in DeviceType._value2member_map_:
                known = ", ".join(t.value for t in DeviceType)
                raise DevicePluginConfigError(f"types.{key}: not a device type ({known})")
            _convert(value, TypeConfig, f"types.{key}")
    return _convert(data, DevicePluginConfig, "")


def load_config(path: Path) -> DevicePluginConfig:
    import yaml  # only a config file needs it (the device plugin reads none by default)

    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
    except OSError as err:
        raise DevicePluginConfigError(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise DevicePluginConfigError(f"{path}: not valid YAML: {err}") from err
    try:
        return parse_config(data)
    except DevicePluginConfigError as err:
        raise DevicePluginConfigError(f"{path}: {err}") from None


def resource_names(dev: Device, cfg: TypeConfig) -> list[str]:
    names = []
    if cfg.generic:
        names.append(f"{DOMAIN}/{dev.type.value}")
    if cfg.per_model:
        names.append(f"{DOMAIN}/{dev.type.value}-{model_slug(dev)}")
    return names
