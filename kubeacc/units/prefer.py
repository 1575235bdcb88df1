"""A ranked list of models ("H100, else A100, else KunLun R200") and a model's rank in it.

Written as a pod annotation ``kubeacc.io/prefer-models: "H100,A100,KunLun R200"``: names
match models by tokens (:mod:`kubeacc.units.names`); a model matched by none of them is not
wanted, unless the list ends with ``*`` (any other model, ranked last).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from kubeacc.units.names import matches, tokens

ANY = "*"
#: A ranking names a handful of models; a longer one is a mistake or an attack (every entry
#: is matched against every model the extender sees, for every request).
MAX_NAMES = 64
MAX_TEXT = 4096


class PreferenceError(ValueError):
    pass


@dataclass(frozen=True)
class Preference:
    names: tuple[str, ...] = ()
    any_other: bool = False
    _patterns: tuple[tuple[str, ...], ...] = field(default=(), compare=False, repr=False)
    _ranks: dict[str, int | None] = field(default_factory=dict, compare=False, repr=False)

    @property
    def empty(self) -> bool:
        return not self.names and not self.any_other

    def rank(self, model: str) -> int | None:
        """0 for the first name's models, 1 for the second's...; None: not wanted."""
        if self.empty:
            return 0
        ranks = self._ranks
        if model in ranks:
            return ranks[model]
        have = tokens(model)
        got: int | None = None
        for i, pattern in enumerate(self._patterns):
            if matches(pattern, have):
                got = i
                break
        if got is None and self.any_other:
            got = len(self._patterns)
        ranks[model] = got
        return got

    def __str__(self) -> str:
        return ", ".join([*self.names, *([ANY] if self.any_other else [])])


def parse_preference(text: str) -> Preference:
    """``"H100, A100 ,KunLun R200,*"`` → a :class:`Preference`; :class:`PreferenceError` for
    an entry that names nothing, a ``*`` that is not last, or a list over
    :data:`MAX_NAMES` entries or :data:`MAX_TEXT` characters."""
    if len(text) > MAX_TEXT:
        raise PreferenceError(f"{len(text)} characters; at most {MAX_TEXT}")
    if text.count(",") >= MAX_NAMES:
        raise PreferenceError(f"{text.count(',') + 1} entries; at most {MAX_NAMES}")
    items = [part.strip() for part in text.split(",")]
    if items == [""]:
        return Preference()
    names: list[str] = []
    any_other = False
    for i, item in enumerate(items):
        if item == ANY:
            if i != len(items) - 1:
                raise PreferenceError(f"{text!r}: '*' (any other model) must come last")
            any_other = True
            continue
        if not tokens(item):
            raise PreferenceError(f"{text!r}: entry {i + 1} ({item!r}) names no model")
        names.append(item)
    return Preference(tuple(names), any_other, tuple(tokens(n) for n in names))
