"""CEL device selectors in kube-scheduler's CEL environment.

The evaluator is ``cel-expr-python`` (Google's CEL C++ implementation with its type checker;
the choice and its measured conformance are in docs/dependencies.md). The environment is the
one kube-scheduler 1.36 compiles device selectors with, as far as this implementation
allows:

* cel-go extensions of the Kubernetes base environment: strings (version 2), sets, lists,
  optional types (``.?field``, ``[?key]``, ``orValue``), two-variable comprehensions, and
  ``cel.bind`` from the DRA environment; no math or encoders (kube-scheduler has neither);
* the Kubernetes libraries (:mod:`kubeacc.engine.k8scel`): quantity, semver, regex, URLs,
  IP, CIDR, the list functions and the format library (:mod:`kubeacc.engine.celformatlib`);
  cross-type numeric ordering, ``string(ip)``,
  ``list.indexOf`` and ``transformMap`` through :mod:`kubeacc.engine.celrewrite`;
* homogeneous aggregate literals checked at compile time (:mod:`kubeacc.engine.celcheck`);
* the result must be a bool (or dyn), as the DRA compiler demands.

``device`` has ``driver``, ``attributes[domain][id]``, ``capacity[domain][id]`` (quantities)
and ``allowMultipleAllocations``. Looking up a domain the device does not have yields an empty
map (as the API documents); an unknown attribute is an evaluation error. What the
implementation cannot express is refused with "unsupported CEL feature" (see
:data:`kubeacc.engine.k8scel.UNSUPPORTED` and docs/dra.md); the runtime cost limit is
counted while a selector runs (:mod:`kubeacc.engine.celcount`; :mod:`kubeacc.engine.celcost`
refuses expressions without macros whose iterations alone pass it).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import lru_cache
from typing import Any

from cel_expr_python import cel

from kubeacc.engine import (
    celcount,
    celformatcheck,
    celformatlib,
    celgo,
    celquantity,
    celquantityeq,
    celrewrite,
    k8scel,
)
from kubeacc.engine.celcheck import LiteralTypeError, check_homogeneous
from kubeacc.engine.celcost import CostLimitError, check_cost
from kubeacc.engine.celformatcheck import FormatCheckError, check_format_calls
from kubeacc.engine.quantity import is_quantity
from kubeacc.engine.release import DEFAULT as DEFAULT_RELEASE
from kubeacc.engine.release import RELEASES

qvalue = k8scel.qvalue
svalue = k8scel.svalue

#: a domain an expression names: ``device.attributes["d"]`` (``[?"d"]``) or ``device.attributes.d``
#: (``.?d``, ``has(device.attributes.d)``). kube-scheduler's map of domains answers every key
#: (an unknown domain is an empty map, and ``has()`` of one is true), so each domain named is
#: present in the expression's activation (a name followed by ``(`` is a call, not a domain)
_DOMAIN_RE = re.compile(
    r"device\s*\.\s*(attributes|capacity)\s*"
    r"(?:\[\s*\??\s*(['\"])([^'\"]+)\2\s*\]|\.\s*\??\s*([A-Za-z_][A-Za-z0-9_]*)\b(?!\s*\())"
)
#: an expression that may compare quantities with ``==``/``!=`` (by value, whatever form Go
#: holds them in: :mod:`kubeacc.engine.celquantity`)
_QUANTITY_EQ_RE = re.compile(r"(?=.*(?:==|!=))(?=.*(?:quantity|capacity))", re.S)
#: a ``[`` that opens a list literal rather than an index (the walk over the checked
#: expression is skipped when there is none)
_LIST_LITERAL_RE = re.compile(r"(?:^|[(,=!<>&|+\-*/%?:\[{]|\bin)\s*\[")
_UNSUPPORTED_RE = re.compile(r"@mapInsert")
#: a macro call that expands to a comprehension (only those expressions are rewritten to count
#: their cost while they run: :mod:`kubeacc.engine.celcount`)
_MACRO_RE = re.compile(
    r"\.\s*(?:all|exists|exists_one|existsOne|map|filter|transformList|transformMap|"
    r"transformMapEntry|sortBy)\s*\("
)
#: how many rounds of renaming rejected calls a compile may take (each round renames every
#: call the checker reported; a call inside a rejected one is reported in a later round)
_RENAME_ROUNDS = 8

#: the cel-go extensions of kube-scheduler's device selector environment, by the
#: implementation's names
_EXTENSIONS = """name: kubernetes-dra-device-selectors
extensions:
  - name: strings
    version: 2
  - name: sets
  - name: lists
  - name: optional
  - name: bindings
  - name: two-var-comprehensions
"""


class CelError(Exception):
    """Compiling or evaluating a selector failed."""


@lru_cache(maxsize=1)
def environment() -> Any:
    return cel.NewEnv(
        descriptor_pool=k8scel.pool(),
        config=cel.NewEnvConfigFromYaml(_EXTENSIONS + celrewrite.ORDERING_YAML),
        functions=[
            *k8scel.declarations(),
            celformatcheck.declaration(),
            *celcount.declarations(),
            *celquantityeq.declarations(),
        ],
        variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)},
    )


@dataclass(frozen=True)
class Selector:
    expression: str
    program: Any
    domains: frozenset[tuple[str, str]]
    #: the static cost of the root region when the program counts its cost as it runs
    #: (:mod:`kubeacc.engine.celcount`), else None
    base_cost: int | None = None
    #: the expression may compare quantities with ``==``/``!=``, and this program compares
    #: their messages (value and form): on a device with a capacity in an unusual form,
    #: :meth:`DeviceEnv.matches` runs the variant that compares values instead
    #: (:mod:`kubeacc.engine.celquantity`), compiled then
    lazy_equality: bool = False
    format_static_types: bool = False

    def short(self, width: int = 60) -> str:
        e = " ".join(self.expression.split())
        return e if len(e) <= width else e[: width - 3] + "..."


def _unsupported(expression: str) -> str | None:
    if _UNSUPPORTED_RE.search(expression) is None:
        return None
    return _unsupported_message("mapInsert")


def _unsupported_message(key: str) -> str:
    return f"unsupported CEL feature {key!r}: {k8scel.UNSUPPORTED[key]}"


#: per release name: whether ``string.format`` checks an attribute argument's static type
_FORMAT_STATIC = {name: r.format_static_types for name, r in RELEASES.items()}


def compile_selector(expression: str, release: str = DEFAULT_RELEASE) -> Selector:
    """Compile once; raises :class:`CelError` for what kube-scheduler of ``release`` (``1.36``,
    ``1.37``: :mod:`kubeacc.engine.release`) would not compile, or for a feature this
    evaluator does not support (the message says which). Releases that compile alike share
    one cached program."""
    return compile_cached(expression, _FORMAT_STATIC[release])


@lru_cache(maxsize=4096)
def compile_cached(
    expression: str, format_static_types: bool, value_equality: bool = False
) -> Selector:
    """:func:`compile_selector` by what tells releases apart (``__wrapped__``: uncached);
    ``value_equality``: ``==``/``!=`` between quantities compare values whatever their form
    (done anyway when a ``quantity(...)`` of the expression may have an unusual form; else
    only for a device whose capacity has one, as renaming costs about 0.3 ms a compile)."""
    unsupported = _unsupported(expression)
    if unsupported:
        raise CelError(f"compile {expression!r}: {unsupported}")
    program = _check(expression)
    counted = _MACRO_RE.search(expression) is not None
    try:
        literal = "{" in expression or _LIST_LITERAL_RE.search(expression) is not None
        if literal or "range" in expression:
            checked = program.serialize()
            if literal:
                check_homogeneous(checked)
            if "range" in expression and not counted:
                check_cost(checked)
        if "format" in expression:
            check_format_calls(program.serialize(), not format_static_types)
    except (LiteralTypeError, CostLimitError, FormatCheckError) as e:
        raise CelError(f"compile {expression!r}: {e}") from None
    rtype = program.return_type()
    if rtype not in (cel.Type.BOOL, cel.Type.DYN):
        raise CelError(f"compile {expression!r}: must evaluate to bool, not {rtype.name()}")
    quantities = _QUANTITY_EQ_RE.search(expression) is not None
    eager = quantities and (value_equality or _unusual_quantity_literal(expression))
    if "transformMap" in expression or "format" in expression or eager:
        serialized = program.serialize()
        rewritten = serialized
        if celrewrite.MAP_INSERT in rewritten:
            rewritten = celrewrite.own_map_insert(rewritten)
        if "format" in expression:
            rewritten = celformatcheck.rename_format_calls(rewritten)
        if eager:
            rewritten = celquantityeq.rename_quantity_equality(rewritten)
        if rewritten != serialized:
            program = environment().deserialize(rewritten)
    base_cost = None
    if counted:
        rewritten, base_cost, loops = celcount.rewrite(program.serialize())
        if loops:
            program = environment().deserialize(rewritten)
        else:
            base_cost = None
    domains = frozenset(
        (m.group(1), m.group(3) if m.group(3) is not None else m.group(4))
        for m in _DOMAIN_RE.finditer(expression)
    )
    return Selector(
        expression,
        program,
        domains,
        base_cost,
        lazy_equality=quantities and not eager,
        format_static_types=format_static_types,
    )


_QUANTITY_CALL_RE = re.compile(r"\bquantity\s*\(\s*(?:\"([^\"\\]*)\"|'([^'\\]*)')?\s*(\))?")


def _unusual_quantity_literal(expression: str) -> bool:
    """A ``quantity(...)`` call whose value may be held in a form other than the usual
    integer: an argument that is not a plain string literal, or a literal such as ``1000m``."""
    for m in _QUANTITY_CALL_RE.finditer(expression):
        text = m.group(1) if m.group(1) is not None else m.group(2)
        if text is None or m.group(3) is None:
            return True
        if is_quantity(text) and celquantity.go_rep(text) != celquantity.INT:
            return True
    return False


def _check(expression: str) -> Any:
    """Parse and type-check, renaming the calls the checker rejects that kube-scheduler's
    environment accepts (:func:`kubeacc.engine.celrewrite.rename_rejected_calls`)."""
    own = celrewrite.own_name_used(expression)
    if own is not None:
        raise CelError(f"compile {expression!r}: undeclared reference to {own!r}")
    source = celformatlib.rewrite(expression)
    for _ in range(_RENAME_ROUNDS):
        try:
            return environment().compile(source)
        except Exception as e:  # the binding raises one exception type per status code
            renamed = celrewrite.rename_rejected_calls(source, str(e))
            if renamed is None:
                msg = celrewrite.public_message(_first_line(e))
                raise CelError(f"compile {expression!r}: {msg}") from None
            source = renamed
    raise CelError(f"compile {expression!r}: too many calls to rename")


class DeviceEnv:
    """The reusable CEL activations of one device."""

    __slots__ = ("_acts", "go_device", "unusual_forms", "variable")

    def __init__(
        self, variable: dict[str, Any], go_device: Callable[[], str] | None = None
    ) -> None:
        self.variable = variable
        #: the device as kube-scheduler's CEL library reads it (:func:`celgo.device_json`),
        #: made when a selector first needs that library
        self.go_device = go_device
        self._acts: dict[frozenset[tuple[str, str]], Any] = {}
        #: a capacity is held in a form other than the usual integer (``0.5Ti``, ``1000m``)
        self.unusual_forms = any(
            getattr(q, "rep", "")
            for caps in variable.get("capacity", {}).values()
            for q in caps.values()
        )

    def _activation(self, selector: Selector) -> Any:
        """One activation per set of domains indexed: domains an expression indexes but the
        device lacks read as empty maps in that expression only, never in others."""
        act = self._acts.get(selector.domains)
        if act is None:
            variable = dict(self.variable)
            for kind, domain in selector.domains:
                if domain not in variable[kind]:
                    variable[kind] = {**variable[kind], domain: {}}
            act = environment().Activation({"device": variable})
            self._acts[selector.domains] = act
        return act

    def matches(self, selector: Selector) -> bool:
        if selector.lazy_equality and self.unusual_forms:
            selector = compile_cached(selector.expression, selector.format_static_types, True)
        try:
            if selector.base_cost is None:
                result = selector.program.eval(self._activation(selector))
            else:
                result, _ = celcount.evaluate(
                    selector.program, self._activation(selector), selector.base_cost
                )
        except celcount.CostLimitExceeded as e:
            if str(e) == celcount.ITERATION_MESSAGE:
                return self._past_cap(selector)
            raise CelError(f"{selector.short()}: {e}") from None
        except Exception as e:
            if celcount.is_iteration_cap(e):
                return self._past_cap(selector)
            msg = celrewrite.public_message(_first_line(e))
            raise CelError(f"{selector.short()}: {msg}") from None
        value = result.value()
        if isinstance(value, bool):
            return value
        if result.type() == cel.Type.ERROR:
            if celcount.is_iteration_cap(result.plain_value()):
                return self._past_cap(selector)
            msg = celrewrite.public_message(_first_line(result.plain_value()))
            raise CelError(f"{selector.short()}: {msg}")
        if not isinstance(value, bool):
            raise CelError(f"{selector.short()}: expression must evaluate to bool, got {value!r}")
        return value

    def _past_cap(self, selector: Selector) -> bool:
        """A selector the evaluator stopped at its iteration cap, run again in kube-scheduler's
        own CEL (:mod:`kubeacc.engine.celgo`) with the scheduler's cost limit; without that
        library the selector could not be evaluated, and the error says so."""
        if self.go_device is None:
            raise CelError(
                f"{selector.short()}: could not be evaluated: {celcount.ITERATION_MESSAGE}"
            )
        try:
            return celgo.matches(selector.expression, self.go_device())
        except celgo.Unavailable as e:
            raise CelError(
                f"{selector.short()}: could not be evaluated: {celcount.ITERATION_MESSAGE}; {e}"
            ) from None
        except celgo.GoCelError as e:
            raise CelError(f"{selector.short()}: {_first_line(e)}") from None


def _first_line(e: object) -> str:
    msg = str(e).strip()
    return msg.splitlines()[0] if msg else type(e).__name__
