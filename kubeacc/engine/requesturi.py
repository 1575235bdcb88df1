"""Whether a string parses as a request URI, with the error kube-scheduler's format library
reports (``format.uri()``): the parse of an absolute URI or absolute path an HTTP request
line carries (no fragment), as Go's ``net/url`` does it with colons in a host read strictly.

Limit: for a bracketed host that is not an IP address the reason after ``invalid host:`` is
this project's wording, not Go's (validity is the same).
"""

from __future__ import annotations

import ipaddress

from kubeacc.engine.goquote import go_quote

#: the ASCII bytes a host (and a zone) may hold unescaped
_HOST_OK = frozenset(
    "!\"$&'()*+,-.0123456789:;<=>ABCDEFGHIJKLMNOPQRSTUVWXYZ[]_abcdefghijklmnopqrstuvwxyz~"
)
_USERINFO_EXTRA = frozenset("-._:~!$&'()*+,;=%@")
_HEX = frozenset("0123456789abcdefABCDEF")


class _UriError(ValueError):
    pass


def request_uri_error(s: str) -> str | None:
    """None when ``s`` is a valid request URI, else the parse error as Go words it."""
    try:
        _parse(s)
    except _UriError as e:
        return f"parse {go_quote(s)}: {e}"
    return None


def _parse(raw: str) -> None:
    if any(ord(c) < 0x20 or ord(c) == 0x7F for c in raw):
        raise _UriError("net/url: invalid control character in URL")
    if raw == "":
        raise _UriError("empty url")
    if raw == "*":
        return
    scheme, rest = _scheme(raw)
    # a lone trailing "?" forces an empty query; otherwise the query ends the path
    single = rest.endswith("?") and rest.count("?") == 1
    rest = rest[:-1] if single else rest.partition("?")[0]
    if not rest.startswith("/"):
        if scheme:
            return  # an opaque URI
        raise _UriError("invalid URI for request")
    if scheme and rest.startswith("//"):
        authority, slash, path = rest[2:].partition("/")
        _authority(scheme.lower(), authority)
        rest = slash + path
    _unescape(rest, "path")


def _scheme(raw: str) -> tuple[str, str]:
    for i, c in enumerate(raw):
        if c.isascii() and c.isalpha():
            continue
        if c.isascii() and (c.isdigit() or c in "+-."):
            if i == 0:
                return "", raw
            continue
        if c == ":":
            if i == 0:
                raise _UriError("missing protocol scheme")
            return raw[:i], raw[i + 1 :]
        return "", raw
    return "", raw


def _authority(scheme: str, authority: str) -> None:
    at = authority.rfind("@")
    _host(scheme, authority[at + 1 :])
    if at < 0:
        return
    userinfo = authority[:at]
    if any(not (c.isascii() and c.isalnum()) and c not in _USERINFO_EXTRA for c in userinfo):
        raise _UriError("net/url: invalid userinfo")
    for part in userinfo.split(":", 1):
        _unescape(part, "path")


def _valid_port(port: str) -> bool:
    return port == "" or (port[0] == ":" and all("0" <= c <= "9" for c in port[1:]))


def _host(scheme: str, host: str) -> None:
    bracket = host.rfind("[")
    if bracket > 0:
        raise _UriError("invalid IP-literal")
    if bracket == 0:
        _ip_literal(host)
        return
    colon = host.find(":")
    if colon >= 0:
        if scheme not in ("http", "https"):
            colon = host.rfind(":")  # only http(s) hosts read colons strictly
        port = host[colon:]
        if not _valid_port(port):
            raise _UriError(f"invalid port {go_quote(port)} after host")
    _unescape(host, "host")


def _ip_literal(host: str) -> None:
    close = host.rfind("]")
    if close < 0:
        raise _UriError("missing ']' in host")
    port = host[close + 1 :]
    if not _valid_port(port):
        raise _UriError(f"invalid port {go_quote(port)} after host")
    name = host[1:close]
    zone = name.find("%25")
    if zone >= 0:
        literal = _unescape(name[:zone], "host") + _unescape(name[zone:], "zone")
    else:
        literal = _unescape(name, "host")
    try:
        addr = ipaddress.ip_address(literal)
    except ValueError:
        raise _UriError(f"invalid host: {go_quote(literal)} is not an IP address") from None
    if addr.version == 4:
        raise _UriError("invalid IP-literal")


def _unescape(s: str, mode: str) -> str:
    """Percent-decoding in ``mode`` (``path``, ``host`` or ``zone``), with Go's refusals."""
    b = s.encode()
    out = bytearray()
    i = 0
    while i < len(b):
        c = b[i]
        if c == 0x25:  # %
            if i + 2 >= len(b) or chr(b[i + 1]) not in _HEX or chr(b[i + 2]) not in _HEX:
                raise _UriError(f"invalid URL escape {_quote(b[i : i + 3])}")
            esc = b[i : i + 3]
            value = int(esc[1:], 16)
            if esc != b"%25" and (
                (mode == "host" and value >> 4 < 8)
                or (mode == "zone" and value != 0x20 and chr(value) not in _HOST_OK)
            ):
                raise _UriError(f"invalid URL escape {_quote(esc)}")
            out.append(value)
            i += 3
            continue
        if mode != "path" and c < 0x80 and chr(c) not in _HOST_OK:
            raise _UriError(f"invalid character {go_quote(chr(c))} in host name")
        out.append(c)
        i += 1
    return out.decode(errors="replace")


def _quote(b: bytes) -> str:
    return go_quote(b.decode(errors="replace"))
