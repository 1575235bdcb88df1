"""What a pod asks of the extender: per container, whole GPUs or a share of one GPU.

Resources (device-plugin mode, see DESIGN.md "Sharing contract"):

* ``kubeacc.io/gpu``: whole GPUs of any model; ``kubeacc.io/gpu-<model>``: whole GPUs of one
  model (the model slug of :func:`kubeacc.contracts.names.model_slug`);
* ``kubeacc.io/gpu-memory``: MiB of one GPU's memory; ``kubeacc.io/gpu-cores``: percent of one
  GPU's compute. A container with either gets a share of exactly one GPU.

* ``kubeacc.io/gpu-units``: normalized units (kubeacc.units): whole GPUs of one model whose
  units add up to at least the number asked (of several models only with the annotation
  ``kubeacc.io/mix-models: "true"``).

A pod may rank models with the annotation ``kubeacc.io/prefer-models`` (``H100,A100,*``; the
older ``kubeacc.io/gpu-models`` means the same): only those models (``*``: any other, last),
the first one preferred. Names match models by tokens (kubeacc.units.names).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from kubeacc.contracts.names import (
    DECISION_ANNOTATION,
    GPU_CORES_RESOURCE,
    GPU_MEMORY_RESOURCE,
    GPU_UNITS_RESOURCE,
    MIX_ANNOTATION,
    MODELS_ANNOTATION,
    PREFER_ANNOTATION,
)
from kubeacc.engine.quantity import parse_quantity
from kubeacc.units.prefer import Preference, PreferenceError, parse_preference
from kubeacc.units.table import active_table

DOMAIN = "kubeacc.io"
GPU = f"{DOMAIN}/gpu"
MEMORY = GPU_MEMORY_RESOURCE
CORES = GPU_CORES_RESOURCE
UNITS = GPU_UNITS_RESOURCE
MODEL_PREFIX = f"{DOMAIN}/gpu-"
#: Resources the extender manages (KubeSchedulerConfiguration ``managedResources``); per-model
#: whole-GPU resources are matched by prefix.
SHARED_RESOURCES = (MEMORY, CORES)
#: ``kubeacc.io/gpu-<x>`` names that are not models.
NOT_MODELS = frozenset({"memory", "cores", "units"})
MAX_CORES = 100


class WantError(ValueError):
    """The pod's requests make no sense (the extender refuses it on every node)."""


@dataclass(frozen=True)
class ContainerWant:
    name: str
    whole: int = 0
    model: str | None = None
    memory: int = 0  # MiB
    cores: int = 0  # percent
    units: int = 0  # normalized units (whole GPUs whose units add up)

    @property
    def shared(self) -> bool:
        return self.memory > 0 or self.cores > 0


@dataclass(frozen=True)
class PodWant:
    containers: tuple[ContainerWant, ...]
    #: Ranked models (for everything but per-model resources); empty: any model, no ranking.
    prefer: Preference = field(default_factory=Preference)
    #: A units request may be served by GPUs of several models.
    mix: bool = False

    @property
    def empty(self) -> bool:
        return not self.containers

    @property
    def models(self) -> tuple[str, ...]:
        """The ranking as text (empty: none); part of the memo keys."""
        return () if self.prefer.empty else (str(self.prefer),)

    def rank(self, model: str) -> int | None:
        """The model's rank in the pod's wish (0 without one); None: not wanted."""
        return self.prefer.rank(model)

    @property
    def whole(self) -> int:
        return sum(c.whole for c in self.containers)

    @property
    def largest_share(self) -> int:
        return max((c.memory for c in self.containers if c.shared), default=0)


def _count(resource: str, value: Any, container: str) -> int:
    try:
        q = parse_quantity(value)
    except (ValueError, TypeError) as err:
        raise WantError(f"container {container}: {resource}: not a quantity: {value!r}") from err
    if q.denominator != 1 or q < 0:
        raise WantError(f"container {container}: {resource}: must be a whole number, not {value}")
    return int(q)


def container_want(name: str, resources: Mapping[str, Any] | None) -> ContainerWant | None:
    """The want of one container from its ``resources`` (limits win over requests)."""
    res = resources or {}
    asked: dict[str, Any] = {**(res.get("requests") or {}), **(res.get("limits") or {})}
    whole = 0
    model: str | None = None
    memory = cores = units = 0
    for key, value in asked.items():
        if key == UNITS:
            units = _count(key, value, name)
        elif key == MEMORY:
            memory = _count(key, value, name)
        elif key == CORES:
            cores = _count(key, value, name)
        elif key == GPU:
            whole += _count(key, value, name)
        elif key.startswith(MODEL_PREFIX) and key[len(MODEL_PREFIX) :] not in NOT_MODELS:
            n = _count(key, value, name)
            if n and model is not None:
                raise WantError(f"container {name}: whole GPUs of two models ({model}, {key})")
            if n:
                model = key[len(MODEL_PREFIX) :]
                whole += n
    if cores > MAX_CORES:
        raise WantError(f"container {name}: {CORES} is a percent of one GPU, at most 100")
    if whole and (memory or cores):
        raise WantError(
            f"container {name}: asks for whole GPUs and a share ({MEMORY}/{CORES}) at once"
        )
    if model is not None and asked.get(GPU):
        raise WantError(f"container {name}: both {GPU} and {MODEL_PREFIX}{model}")
    if units and (whole or memory or cores):
        raise WantError(
            f"container {name}: asks for {UNITS} and other GPU resources at once; "
            "units are served as whole GPUs"
        )
    if not (whole or memory or cores or units):
        return None
    return ContainerWant(name, whole, model, memory, cores, units)


def pod_want(pod: Mapping[str, Any]) -> PodWant:
    """The want of a pod (a Pod as a dict, API field names); :class:`WantError` if invalid."""
    spec = pod.get("spec") or {}
    for c in spec.get("initContainers") or []:
        if container_want(str(c.get("name", "")), c.get("resources")) is not None:
            raise WantError(
                f"init container {c.get('name')}: GPUs for init containers are not supported "
                "by kubeacc extender"
            )
    wants = []
    for c in spec.get("containers") or []:
        w = container_want(str(c.get("name", "")), c.get("resources"))
        if w is not None:
            wants.append(w)
    annotations = (pod.get("metadata") or {}).get("annotations") or {}
    key = PREFER_ANNOTATION if PREFER_ANNOTATION in annotations else MODELS_ANNOTATION
    if key in annotations:
        try:
            prefer = parse_preference(str(annotations[key]))
        except PreferenceError as err:
            raise WantError(f"annotation {key}: {err}") from err
    else:  # the cluster's default ranking (unit table preferModels), if any
        prefer = active_table().prefer
    mix = str(annotations.get(MIX_ANNOTATION, "")).strip().lower()
    if mix not in ("", "true", "false"):
        raise WantError(f'annotation {MIX_ANNOTATION}: "true" or "false", not {mix!r}')
    return PodWant(tuple(wants), prefer, mix == "true")


# -- the decision ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Assigned:
    """What one container got: whole GPUs, or a share of one GPU (``devices`` has one BDF)."""

    container: str
    devices: tuple[str, ...]
    memory: int = 0
    cores: int = 0
    whole: bool = False
    #: Units asked (a units request: ``devices`` are whole GPUs whose units add up to more).
    units: int = 0

    def as_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"name": self.container, "devices": list(self.devices)}
        if self.whole:
            out["whole"] = True
            if self.units:
                out["units"] = self.units
        else:
            out["memory"] = self.memory
            out["cores"] = self.cores
        return out


@dataclass(frozen=True)
class Decision:
    node: str
    containers: tuple[Assigned, ...] = field(default_factory=tuple)
    #: When the extender decided (epoch seconds): the device plugin hands decisions out in
    #: this order, the order the pods of a node were bound in.
    at: float = 0.0

    def to_json(self) -> str:
        data: dict[str, Any] = {"node": self.node}
        if self.at:
            data["at"] = self.at
        data["containers"] = [c.as_dict() for c in self.containers]
        return json.dumps(data, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str) -> Decision:
        """Parse an annotation; :class:`WantError` if it is not one of ours."""
        try:
            data = json.loads(text)
            containers = tuple(
                Assigned(
                    container=str(c["name"]),
                    devices=tuple(str(d) for d in c["devices"]),
                    memory=int(c.get("memory", 0)),
                    cores=int(c.get("cores", 0)),
                    whole=bool(c.get("whole", False)),
                    units=int(c.get("units", 0)),
                )
                for c in data["containers"]
            )
            return cls(str(data["node"]), containers, float(data.get("at", 0.0)))
        except (ValueError, KeyError, TypeError) as err:
            raise WantError(f"{DECISION_ANNOTATION}: not a kubeacc decision: {err}") from err

    def container(self, name: str) -> Assigned | None:
        for c in self.containers:
            if c.container == name:
                return c
        return None


def decision_of(pod: Mapping[str, Any]) -> Decision | None:
    """The decision recorded on a pod, None when there is none (or it is unreadable)."""
    meta = pod.get("metadata") or {}
    text = (meta.get("annotations") or {}).get(DECISION_ANNOTATION)
    if not text:
        return None
    try:
        return Decision.from_json(str(text))
    except WantError:
        return None
