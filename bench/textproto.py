"""A small reader for protobuf text format, enough for the CEL conformance test files.

It yields plain Python structures without the message descriptors: a message is a dict from
field name to a list of values (a field may repeat), a scalar is ``str`` (quoted strings,
already unescaped into bytes-as-latin-1 text), ``int``, ``float``, ``bool`` or an enum
identifier (``Ident``).
"""

from __future__ import annotations

import re
from typing import Any

_TOKEN = re.compile(
    r"""\s+|\#[^\n]*
    |(?P<str>"(?:[^"\\\n]|\\.)*"|'(?:[^'\\\n]|\\.)*')
    |(?P<ext>\[[A-Za-z0-9_./]+\])
    |(?P<num>-?(?:0[xX][0-9a-fA-F]+|(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?)[fFuU]?)
    |(?P<ident>-?[A-Za-z_][A-Za-z0-9_.]*)
    |(?P<punct>[{}\[\]:,;<>])""",
    re.VERBOSE,
)

_ESCAPES = {
    "n": 10,
    "r": 13,
    "t": 9,
    "\\": 92,
    "'": 39,
    '"': 34,
    "a": 7,
    "b": 8,
    "f": 12,
    "v": 11,
    "?": 63,
}


class Ident(str):
    """An unquoted identifier value (an enum name, ``true``/``false`` handled separately)."""


def _unescape(body: str) -> bytes:
    out = bytearray()
    i = 0
    raw = body.encode("utf-8")
    while i < len(raw):
        c = raw[i]
        if c != 92:
            out.append(c)
            i += 1
            continue
        n = chr(raw[i + 1])
        if n in _ESCAPES:
            out.append(_ESCAPES[n])
            i += 2
        elif n in "xX":
            m = re.match(rb"[0-9a-fA-F]{1,2}", raw[i + 2 :])
            assert m
            out.append(int(m.group(0), 16))
            i += 2 + len(m.group(0))
        elif n.isdigit():
            m = re.match(rb"[0-7]{1,3}", raw[i + 1 :])
            assert m
            out.append(int(m.group(0), 8) & 0xFF)
            i += 1 + len(m.group(0))
        elif n == "u":
            out += chr(int(raw[i + 2 : i + 6], 16)).encode()
            i += 6
        elif n == "U":
            out += chr(int(raw[i + 2 : i + 10], 16)).encode()
            i += 10
        else:
            raise ValueError(f"unknown escape \\{n}")
    return bytes(out)


class QuotedBytes(bytes):
    """A quoted string field: the raw bytes (for ``bytes`` fields) and ``.text`` (UTF-8)."""

    @property
    def text(self) -> str:
        return self.decode("utf-8", errors="surrogateescape")


def _tokens(text: str) -> list[tuple[str, str]]:
    out: list[tuple[str, str]] = []
    pos = 0
    while pos < len(text):
        m = _TOKEN.match(text, pos)
        if not m:
            raise ValueError(f"textproto: cannot read at {text[pos : pos + 30]!r}")
        pos = m.end()
        if m.lastgroup:
            out.append((m.lastgroup, m.group(m.lastgroup)))
    return out


class _Reader:
    def __init__(self, text: str) -> None:
        self.toks = _tokens(text)
        self.i = 0

    def peek(self) -> tuple[str, str] | None:
        return self.toks[self.i] if self.i < len(self.toks) else None

    def take(self) -> tuple[str, str]:
        t = self.toks[self.i]
        self.i += 1
        return t

    def message(self, end: str | None) -> dict[str, list[Any]]:
        msg: dict[str, list[Any]] = {}
        while True:
            t = self.peek()
            if t is None:
                if end is not None:
                    raise ValueError("textproto: unexpected end")
                return msg
            if t == ("punct", end):
                self.take()
                return msg
            if t[0] == "punct" and t[1] in ",;":
                self.take()
                continue
            kind, name = self.take()
            if kind not in ("ident", "ext"):
                raise ValueError(f"textproto: field name expected, got {name!r}")
            if self.peek() == ("punct", ":"):
                self.take()
            msg.setdefault(name, []).extend(self.values())

    def values(self) -> list[Any]:
        t = self.peek()
        if t == ("punct", "["):
            self.take()
            vals: list[Any] = []
            while self.peek() != ("punct", "]"):
                if self.peek() == ("punct", ","):
                    self.take()
                    continue
                vals.extend(self.values())
            self.take()
            return vals
        return [self.value()]

    def value(self) -> Any:
        kind, tok = self.take()
        if kind == "punct" and tok in "{<":
            return self.message("}" if tok == "{" else ">")
        if kind == "str":
            parts = [_unescape(tok[1:-1])]
            while self.peek() is not None and self.peek()[0] == "str":  # type: ignore[index]
                parts.append(_unescape(self.take()[1][1:-1]))
            return QuotedBytes(b"".join(parts))
        if kind == "num":
            t = tok.rstrip("uUfF") if not tok.lower().startswith(("0x", "-0x")) else tok
            if re.fullmatch(r"-?(0[xX][0-9a-fA-F]+|\d+)", t) and not tok.endswith(("f", "F")):
                return int(t, 0)
            return float(t)
        if kind == "ident":
            low = tok.lower()
            if low in ("true", "t"):
                return True
            if low in ("false", "f"):
                return False
            if low in ("inf", "infinity", "-inf", "-infinity", "nan", "-nan"):
                return float(low)
            return Ident(tok)
        raise ValueError(f"textproto: unexpected {tok!r}")


def parse(text: str) -> dict[str, list[Any]]:
    return _Reader(text).message(None)
