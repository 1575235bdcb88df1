"""Go's ``%q`` quoting of a string, for messages that must read as kube-scheduler's (a module
of its own: the CEL format messages and the URL checks of the format library both use it)."""

from __future__ import annotations

import unicodedata


def go_quote(s: str) -> str:
    """Go's ``%q`` of a string: printable characters as they are, the rest escaped."""
    out = ['"']
    for c in s:
        o = ord(c)
        if c in ('"', "\\"):
            out.append("\\" + c)
        elif c == " " or (o >= 0x20 and unicodedata.category(c)[0] not in "CZ"):
            out.append(c)
        elif c in _SHORT_ESCAPES:
            out.append(_SHORT_ESCAPES[c])
        elif o < 0x20 or o == 0x7F:
            out.append(f"\\x{o:02x}")
        elif o < 0x10000:
            out.append(f"\\u{o:04x}")
        else:
            out.append(f"\\U{o:08x}")
    out.append('"')
    return "".join(out)


_SHORT_ESCAPES = {
    "\a": "\\a",
    "\b": "\\b",
    "\f": "\\f",
    "\n": "\\n",
    "\r": "\\r",
    "\t": "\\t",
    "\v": "\\v",
}
