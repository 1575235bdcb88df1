"""The admin discovery file's schema (``DiscoveryConfig``), validated with pydantic.

Its own module so that a node without the file never imports pydantic:
:func:`kubeacc.discovery.backends.admin.load_config` imports it when it reads a file.
"""

from __future__ import annotations

import re
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from kubeacc.model import DeviceType

_HEX4 = re.compile(r"^(0x)?[0-9a-fA-F]{4}$")


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
