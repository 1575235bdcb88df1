"""The admin's table of model → normalized units, and how a device's model finds its entry.

A file (``--units-table``), usually a ConfigMap's key mounted into the pod::

    apiVersion: kubeacc.io/v1alpha1
    kind: UnitTable
    unit: TFLOPS dense FP16      # what one unit means (free text, shown by kubeacc plan)
    defaults: true               # start from the built-in table (kubeacc.units.defaults)
    models:
      H100: 989                  # any spelling: matched by tokens (kubeacc.units.names)
      A10G: 70
    preferModels: H100,A100      # ranking for pods that name none (any other model: last)

The file may also be the ConfigMap itself (``kind: ConfigMap``, the table under
``data["units.yaml"]``). A mistake is refused as a whole with one line naming the file and the
entry; nothing of a bad table is used.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any

from kubeacc.units.defaults import DEFAULT_UNIT, DEFAULT_UNITS
from kubeacc.units.names import matches, tokens
from kubeacc.units.prefer import ANY, Preference, PreferenceError, parse_preference

API_VERSION = "kubeacc.io/v1alpha1"
KIND = "UnitTable"
CONFIGMAP_KEY = "units.yaml"
MAX_UNITS = 1_000_000


class UnitTableError(ValueError):
    """A table that cannot be used (the message names the file and the entry)."""


@dataclass(frozen=True)
class Entry:
    name: str
    tokens: tuple[str, ...]
    units: int
    source: str = ""


@dataclass(frozen=True)
class UnitTable:
    entries: tuple[Entry, ...]
    unit: str = DEFAULT_UNIT
    #: The cluster's default ranking (pods without kubeacc.io/prefer-models); empty: none.
    prefer: Preference = field(default_factory=Preference)
    _cache: dict[str, Entry | None] = field(default_factory=dict, compare=False, repr=False)

    def entry_for(self, model: str) -> Entry | None:
        """The most specific entry whose name matches ``model`` (None: the model has none)."""
        if model in self._cache:
            return self._cache[model]
        have = tokens(model)
        best: Entry | None = None
        for e in self.entries:
            if matches(e.tokens, have) and (best is None or len(e.tokens) > len(best.tokens)):
                best = e
        self._cache[model] = best
        return best

    def units_for(self, model: str) -> int:
        """Units of one device of ``model``; 0 when the table has no entry for it."""
        e = self.entry_for(model)
        return e.units if e is not None else 0


def _line(err: Exception) -> str:
    return " ".join(str(err).split())


def _units(where: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= MAX_UNITS:
        raise UnitTableError(
            f"{where}: units must be a whole number from 1 to {MAX_UNITS}, not {value!r}"
        )
    return value


def build(
    models: Mapping[Any, Any], *, defaults: bool = True, unit: str | None = None, where: str = ""
) -> UnitTable:
    """A table from ``models`` (name → units), on top of the built-in one when ``defaults``."""
    prefix = f"{where}: " if where else ""
    entries: dict[tuple[str, ...], Entry] = {}
    if defaults:
        for name, units, source in DEFAULT_UNITS:
            entries[tokens(name)] = Entry(name, tokens(name), units, source)
    mine: dict[tuple[str, ...], str] = {}
    for key, value in models.items():
        name = str(key)
        toks = tokens(name)
        if not toks:
            raise UnitTableError(f"{prefix}models: {key!r} is not a model name")
        if toks in mine:
            raise UnitTableError(
                f"{prefix}models.{name}: the same model as {mine[toks]!r} "
                "(names compare by their letters and digits)"
            )
        mine[toks] = name
        entries[toks] = Entry(name, toks, _units(f"{prefix}models.{name}", value), "admin")
    return UnitTable(tuple(entries.values()), unit or (DEFAULT_UNIT if defaults else "unit"))


def parse(data: Any, where: str = "") -> UnitTable:
    """A table from a parsed document (a UnitTable, or a ConfigMap carrying one)."""
    prefix = f"{where}: " if where else ""
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise UnitTableError(f"{prefix}not a {KIND} (a mapping), but {type(data).__name__}")
    if data.get("kind") == "ConfigMap":
        text = (data.get("data") or {}).get(CONFIGMAP_KEY)
        if text is None:
            raise UnitTableError(f"{prefix}ConfigMap has no data key {CONFIGMAP_KEY!r}")
        import yaml  # only a table given in a file or ConfigMap is YAML

        try:
            inner = yaml.safe_load(str(text))
        except yaml.YAMLError as err:
            raise UnitTableError(
                f"{prefix}data.{CONFIGMAP_KEY}: not valid YAML: {_line(err)}"
            ) from err
        return parse(inner, f"{where}[{CONFIGMAP_KEY}]" if where else CONFIGMAP_KEY)
    unknown = set(data) - {"apiVersion", "kind", "unit", "defaults", "models", "preferModels"}
    if unknown:
        raise UnitTableError(f"{prefix}unknown field(s): {', '.join(sorted(map(str, unknown)))}")
    if data.get("apiVersion", API_VERSION) != API_VERSION or data.get("kind", KIND) != KIND:
        raise UnitTableError(
            f"{prefix}expected apiVersion {API_VERSION}, kind {KIND} "
            f"(or a ConfigMap with {CONFIGMAP_KEY})"
        )
    models = data.get("models") or {}
    if not isinstance(models, dict):
        raise UnitTableError(f"{prefix}models: a mapping of model name to units, please")
    defaults = data.get("defaults", True)
    if not isinstance(defaults, bool):
        raise UnitTableError(f"{prefix}defaults: true or false, not {defaults!r}")
    unit = data.get("unit")
    if unit is not None and not isinstance(unit, str):
        raise UnitTableError(f"{prefix}unit: text, not {unit!r}")
    table = build(models, defaults=defaults, unit=unit, where=where)
    ranking = data.get("preferModels")
    if ranking is None:
        return table
    if isinstance(ranking, list):
        ranking = ",".join(str(r) for r in ranking)
    if not isinstance(ranking, str):
        raise UnitTableError(f"{prefix}preferModels: a list of model names, not {ranking!r}")
    try:
        prefer = parse_preference(ranking)
    except PreferenceError as err:
        raise UnitTableError(f"{prefix}preferModels: {err}") from err
    if prefer.names:  # never restricts: every other model stays possible, ranked last
        prefer = parse_preference(",".join([*prefer.names, ANY]))
    return UnitTable(table.entries, table.unit, prefer)


def load(path: Path) -> UnitTable:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as err:
        raise UnitTableError(f"{path}: cannot read: {err.strerror or err}") from err
    import yaml  # only a table given in a file or ConfigMap is YAML

    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as err:
        raise UnitTableError(f"{path}: not valid YAML: {_line(err)}") from err
    return parse(data, str(path))


@lru_cache(maxsize=1)
def default_table() -> UnitTable:
    return build({})


_active: list[UnitTable] = []


def use_table(table: UnitTable | None) -> None:
    """Make ``table`` the one of this process (None: the built-in one again); set once at
    start-up by ``--units-table``."""
    _active[:] = [table] if table is not None else []


def active_table() -> UnitTable:
    """The table of this process: ``--units-table``, else the built-in one."""
    return _active[0] if _active else default_table()
