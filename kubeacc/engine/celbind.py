"""``cel.bind(name, init, body)`` for an interpreter that lacks the macro.

The macro binds ``name`` to ``init`` inside ``body``; it is expanded before compiling by
substituting ``(init)`` for every free use of ``name`` in ``body`` (identifier tokens outside
string literals, not after a ``.``). Device selectors are side-effect free, so evaluating
``init`` at each use gives the same result as binding it once.
"""

from __future__ import annotations

import re

_BIND = re.compile(r"\bcel\s*\.\s*bind\s*\(")
_IDENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


class BindError(ValueError):
    pass


def _skip_string(s: str, i: int) -> int:
    """Index after the string literal starting at ``s[i]``."""
    q = s[i]
    triple = s[i : i + 3] == q * 3
    end = q * 3 if triple else q
    j = i + len(end)
    while j < len(s):
        if s[j] == "\\":
            j += 2
            continue
        if s.startswith(end, j):
            return j + len(end)
        j += 1
    raise BindError("unterminated string literal")


def _split_args(s: str, start: int) -> tuple[list[str], int]:
    """Top-level comma-separated arguments from ``s[start:]`` up to the closing parenthesis."""
    depth = 0
    args: list[str] = []
    cur = start
    i = start
    while i < len(s):
        c = s[i]
        if c in "\"'":
            i = _skip_string(s, i)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":
            if depth == 0:
                args.append(s[cur:i])
                return args, i + 1
            depth -= 1
        elif c == "," and depth == 0:
            args.append(s[cur:i])
            cur = i + 1
        i += 1
    raise BindError("cel.bind without a closing parenthesis")


def _substitute(body: str, name: str, value: str) -> str:
    out: list[str] = []
    i = 0
    while i < len(body):
        c = body[i]
        if c in "\"'":
            j = _skip_string(body, i)
            out.append(body[i:j])
            i = j
            continue
        m = _IDENT.match(body, i)
        if m:
            word = m.group(0)
            prev = "".join(out).rstrip()[-1:]
            out.append(f"({value})" if word == name and prev != "." else word)
            i = m.end()
            continue
        out.append(c)
        i += 1
    return "".join(out)


def expand_bind(expression: str) -> str:
    """The expression with every ``cel.bind`` expanded (innermost first)."""
    while True:
        matches = list(_BIND.finditer(expression))
        if not matches:
            return expression
        m = matches[-1]
        args, end = _split_args(expression, m.end())
        if len(args) != 3 or not _IDENT.fullmatch(args[0].strip()):
            raise BindError("cel.bind needs (name, init, body)")
        name, init, body = (
            args[0].strip(),
            expand_bind(args[1]).strip(),
            expand_bind(args[2]).strip(),
        )
        expanded = f"({_substitute(body, name, init.strip())})"
        expression = expression[: m.start()] + expanded + expression[end:]
