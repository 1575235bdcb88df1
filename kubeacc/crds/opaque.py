"""The opaque DRA configuration kinds of driver ``kubeacc.io``, apiVersion ``kubeacc.io/v1alpha1``.

A ResourceClaim (or DeviceClass) carries them as ``opaque.parameters`` with
``driver: kubeacc.io``; the API server stores them unchecked. This module is their one
definition: the controller builds the ``SharingConfig`` of a policy's DeviceClass with
:func:`sharing_parameters`, and the node agent validates every config it is handed with
:func:`parse_config` (a bad one is a per-claim error; nothing is prepared).
"""

from __future__ import annotations

import re
from enum import StrEnum
from typing import Annotated, Any, ClassVar, Literal

import msgspec

from kubeacc.contracts.names import DOMAIN
from kubeacc.crds.api import API_VERSION, SharingMode, TimeSlice
from kubeacc.crds.views import SharingView

#: ``apiVersion`` of every kind, typed for the field that checks it.
_API: Literal["kubeacc.io/v1alpha1"] = "kubeacc.io/v1alpha1"
_MIB = 1 << 20
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_RESERVED_ENV = {"ACCELERATOR_UNITS"}


class ConfigError(ValueError):
    """An opaque configuration the driver cannot accept (the message names what is wrong)."""


class _Config(
    msgspec.Struct, kw_only=True, forbid_unknown_fields=True, tag_field="kind", rename="camel"
):
    api_version: Literal["kubeacc.io/v1alpha1"]
    #: Extra environment for the containers.
    env: dict[str, str] = msgspec.field(default_factory=dict)

    #: The device type this kind configures ("" = any type).
    DEVICE_TYPE: ClassVar[str] = ""

    def __post_init__(self) -> None:
        for key in self.env:
            if not _ENV_NAME.match(key):
                raise ValueError(f"env: not an environment variable name: {key!r}")
            if key in _RESERVED_ENV:
                raise ValueError(f"env: {key} is set by the driver")


class SharingStrategy(StrEnum):
    #: The device as it is (nothing changed on it).
    EXCLUSIVE = "Exclusive"
    #: Compute mode DEFAULT and the time slice set on the GPU (kubeacc.agent.dra.sharing.applied).
    TIME_SLICING = "TimeSlicing"
    #: Compute mode EXCLUSIVE_PROCESS and the GPU's MPS control daemon started.
    MPS = "MPS"


class GpuSharing(msgspec.Struct, kw_only=True, forbid_unknown_fields=True, rename="camel"):
    strategy: SharingStrategy = SharingStrategy.EXCLUSIVE
    time_slice: TimeSlice = TimeSlice.DEFAULT

    def __post_init__(self) -> None:
        if self.time_slice is not TimeSlice.DEFAULT and self.strategy is not (
            SharingStrategy.TIME_SLICING
        ):
            raise ValueError(f"timeSlice {self.time_slice.value} needs strategy TimeSlicing")


class GpuConfig(_Config, tag="GpuConfig"):
    """GPU settings: sharing (time-slicing or MPS, applied on the GPU) and environment."""

    sharing: GpuSharing | None = None
    #: Whether a memory share's limit is enforced in the container (default: yes; by MPS or the
    #: preloaded share-limit library). false is honoured only from a DeviceClass; a claim's
    #: false is refused (docs/sharing.md).
    enforce: bool | None = None
    DEVICE_TYPE: ClassVar[str] = "gpu"


class Bitstream(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    name: Annotated[
        str, msgspec.Meta(min_length=1, max_length=253, pattern=r"^[A-Za-z0-9][A-Za-z0-9._/-]*$")
    ]
    digest: Annotated[str, msgspec.Meta(pattern=r"^sha256:[0-9a-f]{64}$")]


class FpgaConfig(_Config, tag="FpgaConfig"):
    """The bitstream an FPGA should carry. Recorded now; the life-cycle manager programs it."""

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


class NicConfig(_Config, tag="NicConfig"):
    """SmartNIC / VF settings."""

    vlan: Annotated[int, msgspec.Meta(ge=0, le=4094)] | None = None
    mtu: Annotated[int, msgspec.Meta(ge=68, le=9216)] | None = None
    DEVICE_TYPE: ClassVar[str] = "nic"


class SharingConfig(_Config, tag="SharingConfig"):
    """How an AcceleratorPolicy shares the devices of its DeviceClass (any device type)."""

    #: The policy it comes from.
    policy: Annotated[str, msgspec.Meta(min_length=1, max_length=253)]
    mode: SharingMode = SharingMode.EXCLUSIVE
    max_consumers: Annotated[int, msgspec.Meta(ge=1, le=64)] = 1
    memory_per_consumer_bytes: Annotated[int, msgspec.Meta(ge=1)] | None = None


AnyConfig = GpuConfig | FpgaConfig | NicConfig | SharingConfig


def _parameters(cfg: AnyConfig) -> dict[str, Any]:
    """A config as ``opaque.parameters``: the API's names, unset fields and ``env`` left out."""
    out = msgspec.to_builtins(cfg)
    assert isinstance(out, dict)
    return {k: v for k, v in out.items() if v is not None and k != "env"}


#: Every kind the driver accepts.
KINDS: tuple[str, ...] = ("GpuConfig", "FpgaConfig", "NicConfig", "SharingConfig")


def sharing_parameters(policy: str, sharing: SharingView) -> dict[str, Any]:
    """The ``opaque.parameters`` of the SharingConfig a policy's DeviceClass carries."""
    cfg = SharingConfig(
        api_version=_API,
        policy=policy,
        mode=SharingMode(sharing.mode),
        max_consumers=sharing.max_consumers,
        memory_per_consumer_bytes=sharing.memory_per_consumer_bytes,
    )
    return _parameters(cfg)


def policy_gpu_parameters(sharing: SharingView, gpus_only: bool) -> dict[str, Any] | None:
    """The ``opaque.parameters`` of the GpuConfig a policy's DeviceClass carries so that the
    agent applies the policy's strategy on the GPU, or None when the mode changes no device.

    ``gpus_only``: the policy selects GPUs alone (a GpuConfig refuses other device types).
    A ``MIG`` policy adds none: its partitions are made at prepare, nothing is set on the GPU.
    """
    if not gpus_only:
        return None
    if sharing.mode == SharingMode.TIME_SLICED:
        gpu = GpuSharing(
            strategy=SharingStrategy.TIME_SLICING,
            time_slice=TimeSlice(sharing.time_slice or TimeSlice.DEFAULT),
        )
    elif sharing.mode == SharingMode.MPS:
        gpu = GpuSharing(strategy=SharingStrategy.MPS)
    else:
        return None
    return _parameters(GpuConfig(api_version=_API, sharing=gpu))


def parse_config(parameters: Any) -> AnyConfig:
    """Validate one ``opaque.parameters`` object; raises :class:`ConfigError`."""
    if not isinstance(parameters, dict):
        raise ConfigError("opaque parameters must be a JSON object")
    if parameters.get("apiVersion") != API_VERSION:
        raise ConfigError(
            f"unsupported apiVersion {parameters.get('apiVersion')!r}, want {API_VERSION}"
        )
    try:
        cfg: AnyConfig = msgspec.convert(parameters, AnyConfig)
        return cfg
    except msgspec.ValidationError as exc:
        kind = parameters.get("kind", "?")
        kind = kind if kind in KINDS else repr(str(kind)[:80])
        raise ConfigError(one_line(f"invalid {kind}: {_problem(str(exc))}")) from None


def one_line(text: str) -> str:
    """``text`` with its control characters escaped (``\\n``). A claim's config is a
    namespace user's: its kind or an unknown field's name, quoted in the error, goes to the
    agent's log and the pod's events, and must not start a line there."""
    return "".join(c if c.isprintable() else repr(c)[1:-1] for c in text)


def _problem(message: str) -> str:
    """msgspec's ``text - at `$.a.b``` as ``a.b: text``."""
    text, sep, at = message.rpartition(" - at `$")
    where = at.rstrip("`").lstrip(".")
    return f"{where}: {text}" if sep and where else (text if sep else message)


def config_kind(cfg: AnyConfig) -> str:
    """The ``kind`` of a config (its Struct's tag)."""
    return type(cfg).__name__


def config_json(cfg: AnyConfig) -> dict[str, Any]:
    """A config as JSON, every field (as a claim's prepare records it)."""
    out = msgspec.to_builtins(cfg)
    assert isinstance(out, dict)
    return out


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
