"""Kubernetes' CEL ``format`` library: ``format.<name>()``, ``format.named(name)`` and
``<format>.validate(string)``.

``format.named`` and ``validate`` return optional values (none: no such format, or no errors),
which a function of this CEL implementation cannot build. So each call is rewritten in the
source, before the type check, to an internal function that returns a list of zero or one
element, indexed optionally: ``f.validate(s)`` becomes ``f.kubeacc_fmtValidate(s)[?0]`` and
``format.named(n)`` becomes ``kubeacc_fmtNamed(n)[?0]``. ``list[?0]`` is ``optional.none()``
for an empty list and ``optional.of(list[0])`` otherwise, so the checker types the rewritten
call exactly as kube-scheduler types the original, and it evaluates to the same value. Both
rewrites are postfix, so no operand has to be delimited but the call's own parentheses.

A format is a ``kubeacc.cel.NamedFormat`` message holding the format's name; two formats are
equal when their names are, as in kube-scheduler. ``validate`` on anything but a format, or a
format name that does not exist (``format.nope()``), fails to compile on both sides.
"""

from __future__ import annotations

import re
from typing import Any

VALIDATE = "kubeacc_fmtValidate"
NAMED = "kubeacc_fmtNamed"
MESSAGE = "NamedFormat"

_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_NAMED_CALL = re.compile(r"format\s*\.\s*named\s*\(")
_MEMBER_VALIDATE = re.compile(r"\.\s*validate\s*\(")


def _code_mask(expr: str) -> list[bool]:
    """For each character: whether it is code (not inside a string literal or a comment)."""
    mask = [True] * len(expr)
    i = 0
    n = len(expr)
    while i < n:
        c = expr[i]
        if c == "/" and expr.startswith("//", i):
            end = expr.find("\n", i)
            end = n if end < 0 else end
            mask[i:end] = [False] * (end - i)
            i = end
            continue
        if c not in "'\"":
            i += 1
            continue
        j = i
        while j > 0 and expr[j - 1] in "rRbB":
            j -= 1
        prefix = expr[j:i] if j == 0 or not (expr[j - 1].isalnum() or expr[j - 1] == "_") else ""
        raw = "r" in prefix.lower()
        quote = expr[i : i + 3] if expr.startswith(c * 3, i) else c
        k = i + len(quote)
        while k < n and not expr.startswith(quote, k):
            k += 2 if expr[k] == "\\" and not raw else 1
        end = min(k + len(quote), n)
        mask[i:end] = [False] * (end - i)
        i = end
    return mask


def _closing(expr: str, mask: list[bool], open_paren: int) -> int | None:
    depth = 0
    for k in range(open_paren, len(expr)):
        if not mask[k]:
            continue
        if expr[k] == "(":
            depth += 1
        elif expr[k] == ")":
            depth -= 1
            if depth == 0:
                return k
    return None


def rewrite(expr: str) -> str:
    """The expression with every ``format.named(...)`` and ``.validate(...)`` call rewritten
    to its internal, list-returning function indexed with ``[?0]``; unchanged when it has
    none (or a call is unbalanced: the checker then reports the syntax error)."""
    if "validate" not in expr and "named" not in expr:
        return expr
    mask = _code_mask(expr)
    edits: list[tuple[int, int, str]] = []  # start, end, replacement
    for m in _NAMED_CALL.finditer(expr):
        start = m.start()
        if not mask[start] or (
            start > 0 and (expr[start - 1].isalnum() or expr[start - 1] in "_.")
        ):
            continue
        close = _closing(expr, mask, m.end() - 1)
        if close is not None:
            edits += [(start, m.end(), NAMED + "("), (close + 1, close + 1, "[?0]")]
    for m in _MEMBER_VALIDATE.finditer(expr):
        if not mask[m.start()]:
            continue
        name = expr.index("validate", m.start())
        close = _closing(expr, mask, m.end() - 1)
        if close is not None:
            edits += [(name, name + len("validate"), VALIDATE), (close + 1, close + 1, "[?0]")]
    out = expr
    for start, end, text in sorted(edits, key=lambda e: (e[0], e[1]), reverse=True):
        out = out[:start] + text + out[end:]
    return out


def declarations(message: Any, message_type: Any) -> list[Any]:
    """The library's functions; ``message(name)`` builds a format value of ``message_type``."""
    from cel_expr_python import cel

    from kubeacc.engine.namedformats import FORMATS  # imports string.format's module

    t = cel.Type
    formats = t.List(message_type)

    def validate(fmt: Any, s: str) -> list[list[str]]:
        errors = FORMATS[fmt.value](s)
        return [errors] if errors else []

    def named(name: str) -> list[Any]:
        return [message(name)] if name in FORMATS else []

    def constant(name: str) -> Any:
        value = message(name)
        return lambda: value

    decls = [
        cel.FunctionDecl(
            VALIDATE,
            [
                cel.Overload(
                    "kubeacc_format_validate",
                    t.List(t.List(t.STRING)),
                    [message_type, t.STRING],
                    is_member=True,
                    impl=validate,
                )
            ],
        ),
        cel.FunctionDecl(
            NAMED,
            [cel.Overload("kubeacc_format_named", formats, [t.STRING], impl=named)],
        ),
    ]
    for name in FORMATS:
        decls.append(
            cel.FunctionDecl(
                f"format.{name}",
                [cel.Overload(f"kubeacc_format_{name}", message_type, [], impl=constant(name))],
            )
        )
    return decls
