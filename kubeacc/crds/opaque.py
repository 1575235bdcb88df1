"""The opaque DRA configuration kinds of driver ``kubeacc.io``, apiVersion ``kubeacc.io/v1alpha1``.

A ResourceClaim (or DeviceClass) carries them as ``opaque.parameters`` with
``driver: kubeacc.io``; the API server stores them unchecked. This module is their one
definition: the controller builds the ``SharingConfig`` of a policy's DeviceClass with
:func:`sharing_parameters`, and the node agent validates every config it is handed with
:func:`parse_config` (a bad one is a per-claim error; nothing is prepared).
"""

from __future__ import annotations

import functools
import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    TypeAdapter,
    ValidationError,
    field_validator,
    model_validator,
)

from kubeacc.crds.types import API_VERSION, Sharing, SharingMode, TimeSlice
from kubeacc.model.names import DOMAIN

_MIB = 1 << 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = {"ACCELERATOR_UNITS"}


class ConfigError(ValueError):
    """An opaque configuration the driver cannot accept (the message names what is wrong)."""


class _Config(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    api_version: Literal["kubeacc.io/v1alpha1"] = Field(alias="apiVersion")
    env: dict[str, str] = Field(
        default_factory=dict, description="Extra environment for the containers"
    )

    @field_validator("env")
    @classmethod
    def _check_env(cls, value: dict[str, str]) -> dict[str, str]:
        for key in value:
            if not _ENV_NAME.match(key):
                raise ValueError(f"not an environment variable name: {key!r}")
            if key in _RESERVED_ENV:
                raise ValueError(f"{key} is set by the driver")
        return value

    #: The device type this kind configures ("" = any type).
    DEVICE_TYPE: ClassVar[str] = ""


class SharingStrategy(StrEnum):
    #: The device as it is (nothing changed on it).
    EXCLUSIVE = "Exclusive"
    #: Compute mode DEFAULT and the time slice set on the GPU (kubeacc.agent.dra.applied).
    TIME_SLICING = "TimeSlicing"
    #: Compute mode EXCLUSIVE_PROCESS and the GPU's MPS control daemon started.
    MPS = "MPS"


class GpuSharing(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True, defer_build=True)

    strategy: SharingStrategy = SharingStrategy.EXCLUSIVE
    time_slice: TimeSlice = Field(default=TimeSlice.DEFAULT, alias="timeSlice")

    @model_validator(mode="after")
    def _slice_needs_time_slicing(self) -> GpuSharing:
        if self.time_slice is not TimeSlice.DEFAULT and self.strategy is not (
            SharingStrategy.TIME_SLICING
        ):
            raise ValueError(f"timeSlice {self.time_slice.value} needs strategy TimeSlicing")
        return self


class GpuConfig(_Config):
    """GPU settings: sharing (time-slicing or MPS, applied on the GPU) and environment."""

    kind: Literal["GpuConfig"]
    sharing: GpuSharing | None = None
    enforce: bool | None = Field(
        default=None,
        description="Whether a memory share's limit is enforced in the container (default: "
        "yes; by MPS or the preloaded share-limit library). false is honoured only from a "
        "DeviceClass; a claim's false is refused (docs/sharing.md).",
    )
    DEVICE_TYPE: ClassVar[str] = "gpu"


class Bitstream(BaseModel):
    model_config = ConfigDict(extra="forbid", defer_build=True)

    name: str = Field(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")


class FpgaConfig(_Config):
    """The bitstream an FPGA should carry. Recorded now; the life-cycle manager programs it."""

    kind: Literal["FpgaConfig"]
    bitstream: Bitstream | None = None
    DEVICE_TYPE: ClassVar[str] = "fpga"


def fpga_claim_config(
    name: str, digest: str, requests: tuple[str, ...] = ("fpga",)
) -> dict[str, Any]:
    """A claim's ``spec.devices.config`` entry: the FPGA of ``requests`` is to carry the
    bitstream ``name`` of ``digest`` (``sha256:<hex>``)."""
    parameters = {"apiVersion": API_VERSION, "kind": "FpgaConfig"}
    bitstream = {"name": name, "digest": digest}
    return {
        "requests": list(requests),
        "opaque": {"driver": DOMAIN, "parameters": {**parameters, "bitstream": bitstream}},
    }


class NicConfig(_Config):
    """SmartNIC / VF settings."""

    kind: Literal["NicConfig"]
    vlan: int | None = Field(default=None, ge=0, le=4094)
    mtu: int | None = Field(default=None, ge=68, le=9216)
    DEVICE_TYPE: ClassVar[str] = "nic"


class SharingConfig(_Config):
    """How an AcceleratorPolicy shares the devices of its DeviceClass (any device type)."""

    kind: Literal["SharingConfig"]
    policy: str = Field(min_length=1, max_length=253, description="The policy it comes from")
    mode: SharingMode = SharingMode.EXCLUSIVE
    max_consumers: int = Field(default=1, ge=1, le=64, alias="maxConsumers")
    memory_per_consumer_bytes: int | None = Field(
        default=None, ge=1, alias="memoryPerConsumerBytes"
    )


AnyConfig = GpuConfig | FpgaConfig | NicConfig | SharingConfig
DeviceConfig = Annotated[AnyConfig, Field(discriminator="kind")]


@functools.cache
def _adapter() -> TypeAdapter[AnyConfig]:
    """The validator of every kind, built at the first claim config the process reads.

    Like the models' ``defer_build``: a node agent whose claims carry no config never builds it.
    """
    return TypeAdapter(DeviceConfig)


#: Every kind the driver accepts.
KINDS: tuple[str, ...] = ("GpuConfig", "FpgaConfig", "NicConfig", "SharingConfig")


def sharing_parameters(policy: str, sharing: Sharing) -> dict[str, Any]:
    """The ``opaque.parameters`` of the SharingConfig a policy's DeviceClass carries."""
    cfg = SharingConfig(
        api_version=API_VERSION,
        kind="SharingConfig",
        policy=policy,
        mode=sharing.mode,
        max_consumers=sharing.max_consumers,
        memory_per_consumer_bytes=sharing.memory_per_consumer_bytes,
    )
    return cfg.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"env"})


def policy_gpu_parameters(sharing: Sharing, gpus_only: bool) -> dict[str, Any] | None:
    """The ``opaque.parameters`` of the GpuConfig a policy's DeviceClass carries so that the
    agent applies the policy's strategy on the GPU, or None when the mode changes no device.

    ``gpus_only``: the policy selects GPUs alone (a GpuConfig refuses other device types).
    A ``MIG`` policy adds none: its partitions are made at prepare, nothing is set on the GPU.
    """
    if not gpus_only:
        return None
    if sharing.mode is SharingMode.TIME_SLICED:
        gpu = GpuSharing(
            strategy=SharingStrategy.TIME_SLICING,
            time_slice=sharing.time_slice or TimeSlice.DEFAULT,
        )
    elif sharing.mode is SharingMode.MPS:
        gpu = GpuSharing(strategy=SharingStrategy.MPS)
    else:
        return None
    cfg = GpuConfig(api_version=API_VERSION, kind="GpuConfig", sharing=gpu)
    return cfg.model_dump(mode="json", by_alias=True, exclude_none=True, exclude={"env"})


def parse_config(parameters: Any) -> AnyConfig:
    """Validate one ``opaque.parameters`` object; raises :class:`ConfigError`."""
    if not isinstance(parameters, dict):
        raise ConfigError("opaque parameters must be a JSON object")
    if parameters.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"unsupported apiVersion {parameters.get('apiVersion')!r}, want {API_VERSION}"
        )
    try:
        return _adapter().validate_python(parameters)
    except ValidationError as exc:
        kind = parameters.get("kind", "?")
        problems = "; ".join(
            f"{'.'.join(str(p) for p in e['loc'][1:]) or 'kind'}: {e['msg']}" for e in exc.errors()
        )
        raise ConfigError(f"invalid {kind}: {problems}") from None


def applies_to(cfg: AnyConfig, device_type: str) -> bool:
    """Whether a config of this kind may configure a device of ``device_type``."""
    return cfg.DEVICE_TYPE in ("", device_type)


def config_env(cfg: AnyConfig) -> dict[str, str]:
    """The environment a configuration adds for the devices it applies to."""
    env = dict(cfg.env)
    if isinstance(cfg, GpuConfig) and cfg.sharing is not None:
        env["KUBEACC_GPU_SHARING"] = cfg.sharing.strategy.value
        if cfg.sharing.strategy is SharingStrategy.TIME_SLICING:
            env["KUBEACC_GPU_TIMESLICE"] = cfg.sharing.time_slice.value
    elif isinstance(cfg, FpgaConfig) and cfg.bitstream is not None:
        env["KUBEACC_FPGA_BITSTREAM"] = f"{cfg.bitstream.name}@{cfg.bitstream.digest}"
    elif isinstance(cfg, NicConfig):
        if cfg.vlan is not None:
            env["KUBEACC_NIC_VLAN"] = str(cfg.vlan)
        if cfg.mtu is not None:
            env["KUBEACC_NIC_MTU"] = str(cfg.mtu)
    elif isinstance(cfg, SharingConfig):
        env["KUBEACC_SHARING_POLICY"] = cfg.policy
        env["KUBEACC_SHARING_MODE"] = cfg.mode.value
        env["KUBEACC_SHARING_MAX_CONSUMERS"] = str(cfg.max_consumers)
        if cfg.memory_per_consumer_bytes is not None:
            env["KUBEACC_DEVICE_MEMORY_LIMIT"] = str(cfg.memory_per_consumer_bytes // _MIB)
    return env
