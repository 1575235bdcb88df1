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

from enum import StrEnum
from pathlib import Path
from typing import Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from kubeacc.model import Device, DeviceType
from kubeacc.model.names import model_slug

DOMAIN = "kubeacc.io"


class Strategy(StrEnum):
    SPREAD = "spread"
    PACKED = "packed"


class TypeConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    generic: bool | None = Field(
        default=None, description="serve kubeacc.io/<type> (default: unless perModel)"
    )
    per_model: bool = Field(
        default=False, alias="perModel", description="serve kubeacc.io/<type>-<model> instead"
    )
    replicas: int = Field(default=1, ge=1, le=64, description="shares per device")
    strategy: Strategy = Strategy.SPREAD
    shared: bool = Field(
        default=False,
        description="GPUs only: also serve kubeacc.io/gpu-memory (MiB) and kubeacc.io/gpu-cores "
        "(percent); kubeacc extender decides which GPU every container gets",
    )
    enforce: bool = Field(
        default=True,
        description="GPUs, with shared: hold each kubeacc.io/gpu-memory share to its limit in "
        "the container with the preloaded share-limit library; false: the limit is advisory "
        "(docs/sharing.md)",
    )
    units: bool = Field(
        default=False,
        description="GPUs only, with shared: also serve kubeacc.io/gpu-units (normalized "
        "units of the unit table); kubeacc extender picks whole GPUs whose units add up",
    )

    @model_validator(mode="after")
    def _one_resource(self) -> TypeConfig:
        if self.generic is None:
            self.generic = not self.per_model
        if self.generic and self.per_model:
            raise ValueError(
                "generic and perModel both set: every device would be advertised under two "
                "resources (kubeacc.io/<type> and kubeacc.io/<type>-<model>) and could go to "
                "two pods at once; choose one"
            )
        if not self.generic and not self.per_model:
            raise ValueError("generic and perModel both false: the type would serve nothing")
        if self.units and not self.shared:
            raise ValueError(
                "units without shared: kubeacc.io/gpu-units is served through kubeacc "
                "extender's decisions; set shared: true"
            )
        if self.shared and self.replicas > 1:
            raise ValueError("shared and replicas > 1: choose one way of sharing")
        return self


class DevicePluginConfig(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    api_version: Literal["kubeacc.io/v1alpha1"] = Field(
        default="kubeacc.io/v1alpha1", alias="apiVersion"
    )
    kind: Literal["DevicePluginConfig"] = "DevicePluginConfig"
    types: dict[DeviceType, TypeConfig] = Field(default_factory=dict)
    cdi: bool = Field(default=False, description="also hand out CDI device names")

    @model_validator(mode="after")
    def _shared_gpus_only(self) -> DevicePluginConfig:
        for t, cfg in self.types.items():
            if cfg.shared and t is not DeviceType.GPU:
                raise ValueError(f"types.{t.value}.shared: only GPUs are shared by memory")
        return self

    @classmethod
    def for_types(cls, types: list[DeviceType]) -> DevicePluginConfig:
        return cls(types={t: TypeConfig() for t in types})


class DevicePluginConfigError(ValueError):
    pass


def load_config(path: Path) -> DevicePluginConfig:
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8")) or {}
        return DevicePluginConfig.model_validate(data)
    except OSError as err:
        raise DevicePluginConfigError(f"{path}: cannot read: {err.strerror or err}") from err
    except yaml.YAMLError as err:
        raise DevicePluginConfigError(f"{path}: not valid YAML: {err}") from err
    except ValidationError as err:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'])}: {e['msg'].removeprefix('Value error, ')}"
            for e in err.errors()
        )
        raise DevicePluginConfigError(f"{path}: {problems}") from err


def resource_names(dev: Device, cfg: TypeConfig) -> list[str]:
    names = []
    if cfg.generic:
        names.append(f"{DOMAIN}/{dev.type.value}")
    if cfg.per_model:
        names.append(f"{DOMAIN}/{dev.type.value}-{model_slug(dev)}")
    return names
