"""The named string formats of Kubernetes' CEL ``format`` library, with their messages.

``format.dns1123Label().validate(s)`` and its siblings check ``s`` against one of the formats
the API server validates names and OpenAPI strings with; each validator here returns the
messages the API server's own validator returns, in order (an empty list: valid). Lengths are
counted in bytes and the patterns are anchored at the very end of the text, as Go's are.
``uri`` follows a request-URI parse (:mod:`kubeacc.engine.requesturi`).
"""

from __future__ import annotations

import re
from collections.abc import Callable

from kubeacc.engine.requesturi import request_uri_error

_LABEL = "[a-z0-9]([-a-z0-9]*[a-z0-9])?"
_SUBDOMAIN = _LABEL + "(\\." + _LABEL + ")*"
_DNS1035 = "[a-z]([-a-z0-9]*[a-z0-9])?"
_KEY = "([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]"
_VALUE = "(" + _KEY + ")?"

_LABEL_MSG = (
    "a lowercase RFC 1123 label must consist of lower case alphanumeric characters or '-', "
    "and must start and end with an alphanumeric character"
)
_SUBDOMAIN_MSG = (
    "a lowercase RFC 1123 subdomain must consist of lower case alphanumeric characters, '-' "
    "or '.', and must start and end with an alphanumeric character"
)
_DNS1035_MSG = (
    "a DNS-1035 label must consist of lower case alphanumeric characters or '-', start with "
    "an alphabetic character, and end with an alphanumeric character"
)
_KEY_MSG = (
    "must consist of alphanumeric characters, '-', '_' or '.', and must start and end with an "
    "alphanumeric character"
)
_VALUE_MSG = (
    "a valid label must be an empty string or consist of alphanumeric characters, '-', '_' or "
    "'.', and must start and end with an alphanumeric character"
)

_UUID = re.compile(r"[0-9a-f]{8}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{4}-?[0-9a-f]{12}\Z", re.I)
_BASE64 = re.compile(
    r"(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=|[A-Za-z0-9+/]{4})\Z"
)
_TIME = re.compile(r"([0-9]{2}):([0-9]{2}):([0-9]{2})(.[0-9]+)?(z|([+-][0-9]{2}:[0-9]{2}))\Z")
_DATE = re.compile(r"([0-9]{4})-([0-9]{2})-([0-9]{2})\Z")


def _full(pattern: str) -> Callable[[str], bool]:
    rx = re.compile(pattern + r"\Z")
    return lambda s: rx.match(s) is not None


_is_label = _full(_LABEL)
_is_subdomain = _full(_SUBDOMAIN)
_is_dns1035 = _full(_DNS1035)
_is_key = _full(_KEY)
_is_value = _full(_VALUE)


def _size(s: str) -> int:
    return len(s.encode())


def _regex_error(msg: str, pattern: str, *examples: str) -> str:
    # as the API server writes it: each example followed by ", ", joined by " or "
    shown = " or ".join(f"'{e}', " for e in examples)
    return f"{msg} (e.g. {shown}regex used for validation is '{pattern}')"


def _max_len(n: int, unit: str = "characters") -> str:
    return f"must be no more than {n} {unit}"


def _mask_trailing_dash(s: str) -> str:
    """What the API server validates of a ``generateName`` prefix: a trailing dash stands for
    the generated suffix (the two last bytes are replaced by one letter)."""
    b = s.encode()
    if len(b) > 1 and b.endswith(b"-"):
        return (b[:-2] + b"a").decode(errors="surrogateescape")
    return s


def dns1123_label(s: str) -> list[str]:
    errs = [_max_len(63)] if _size(s) > 63 else []
    if not _is_label(s):
        if _is_subdomain(s):
            errs.append("must not contain dots")
        else:
            errs.append(_regex_error(_LABEL_MSG, _LABEL, "my-name", "123-abc"))
    return errs


def dns1123_subdomain(s: str, unit: str = "characters") -> list[str]:
    errs = [_max_len(253, unit)] if _size(s) > 253 else []
    if not _is_subdomain(s):
        errs.append(_regex_error(_SUBDOMAIN_MSG, _SUBDOMAIN, "example.com"))
    return errs


def dns1035_label(s: str) -> list[str]:
    errs = [_max_len(63)] if _size(s) > 63 else []
    if not _is_dns1035(s):
        errs.append(_regex_error(_DNS1035_MSG, _DNS1035, "my-name", "abc-123"))
    return errs


def qualified_name(s: str) -> list[str]:
    parts = s.split("/")
    errs: list[str] = []
    if len(parts) > 2:
        return [
            "a valid label key "
            + _regex_error(_KEY_MSG, _KEY, "MyName", "my.name", "123-abc")
            + " with an optional DNS subdomain prefix and '/' (e.g. 'example.com/MyName')"
        ]
    name = parts[-1]
    if len(parts) == 2:
        prefix = parts[0]
        if not prefix:
            errs.append("prefix part must be non-empty")
        else:
            errs += ["prefix part " + m for m in dns1123_subdomain(prefix, "bytes")]
    if not name:
        errs.append("name part must be non-empty")
    elif _size(name) > 63:
        errs.append("name part " + _max_len(63, "bytes"))
    if not _is_key(name):
        errs.append("name part " + _regex_error(_KEY_MSG, _KEY, "MyName", "my.name", "123-abc"))
    return errs


def label_value(s: str) -> list[str]:
    errs = [_max_len(63, "bytes")] if _size(s) > 63 else []
    if not _is_value(s):
        errs.append(_regex_error(_VALUE_MSG, _VALUE, "MyValue", "my_value", "12345"))
    return errs


def _is_date(s: str) -> bool:
    m = _DATE.match(s)
    if m is None:
        return False
    year, month, day = (int(g) for g in m.groups())
    if not 1 <= month <= 12:
        return False
    leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
    days = (31, 29 if leap else 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)[month - 1]
    return 1 <= day <= days


def _is_datetime(s: str) -> bool:
    if _size(s) < 4:
        return False
    parts = s.lower().split("t")
    if len(parts) < 2 or not _is_date(parts[0]):
        return False
    m = _TIME.match(parts[1])
    return m is not None and m.group(1) <= "23" and m.group(2) <= "59" and m.group(3) <= "59"


def _check(ok: Callable[[str], bool], message: str) -> Callable[[str], list[str]]:
    return lambda s: [] if ok(s) else [message]


def _uri(s: str) -> list[str]:
    err = request_uri_error(s)
    return [err] if err else []


#: each format by the name ``format.named`` and the ``format.<name>()`` functions take
FORMATS: dict[str, Callable[[str], list[str]]] = {
    "dns1123Label": dns1123_label,
    "dns1123Subdomain": dns1123_subdomain,
    "dns1035Label": dns1035_label,
    "qualifiedName": qualified_name,
    "dns1123LabelPrefix": lambda s: dns1123_label(_mask_trailing_dash(s)),
    "dns1123SubdomainPrefix": lambda s: dns1123_subdomain(_mask_trailing_dash(s)),
    "dns1035LabelPrefix": lambda s: dns1035_label(_mask_trailing_dash(s)),
    "labelValue": label_value,
    "uri": _uri,
    "uuid": _check(lambda s: _UUID.match(s) is not None, "does not match the UUID format"),
    "byte": _check(lambda s: _BASE64.match(s) is not None, "invalid base64"),
    "date": _check(_is_date, "invalid date"),
    "datetime": _check(_is_datetime, "invalid datetime"),
}
