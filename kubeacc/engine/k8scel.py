"""The Kubernetes CEL libraries device selectors may call, declared for ``cel-expr-python``.

kube-scheduler compiles selectors in the Kubernetes base CEL environment (k8s.io/apiserver
``pkg/cel/environment``) extended by the DRA device environment. Its own libraries are
declared here with Python implementations: quantity, semver, regex (``find``/``findAll``),
URLs, IP and CIDR, and the Kubernetes list functions (``isSorted``, ``sum``, ``min``,
``max``). The cel-go extensions of that environment (strings
v2, sets, lists, optional types, two-variable comprehensions, ``cel.bind``) are the CEL
implementation's own.

Opaque Kubernetes values travel as small protobuf messages holding a canonical string, so
``==`` compares values (``quantity("1") == quantity("1000m")``) and the type checker tells
a quantity from a version from an IP.

``string(ip)``/``string(cidr)``, ``list.indexOf``/``lastIndexOf`` and the map insertion of
``transformMap`` are declared here under internal names (:mod:`kubeacc.engine.celrewrite` says
why and how calls reach them). The ``format`` library (``format.dns1123Label()`` …) returns
optional values, which a Python function cannot produce in this implementation; its calls are
rewritten to list-returning functions (:mod:`kubeacc.engine.celformatlib`).
"""

from __future__ import annotations

import ipaddress
import itertools
import re
from collections.abc import Callable
from fractions import Fraction
from functools import cache, lru_cache
from typing import Any
from urllib.parse import parse_qs, urlsplit

from cel_expr_python import cel
from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from kubeacc.engine import celformatlib, celrewrite
from kubeacc.engine.celquantity import INT, add_rep, as_int64, go_rep
from kubeacc.engine.quantity import QuantityError, is_quantity, parse_quantity
from kubeacc.engine.semver import Semver, SemverError, is_semver, parse_semver

PACKAGE = "kubeacc.cel"
OPAQUE = ("Quantity", "Semver", "IP", "CIDR", "URL")
#: every message type of the package: the opaque values and the format library's formats
MESSAGES = (*OPAQUE, celformatlib.MESSAGE)

#: functions kube-scheduler's environment has that this evaluator cannot run, and why
UNSUPPORTED: dict[str, str] = {
    "mapInsert": "a string holding the name of the map insertion transformMap expands to",
}


class KubernetesCelError(ValueError):
    """A Kubernetes library function failed on its input (a CEL evaluation error)."""


@lru_cache(maxsize=1)
def pool() -> descriptor_pool.DescriptorPool:
    fdp = descriptor_pb2.FileDescriptorProto(
        name="kubeacc/cel.proto", package=PACKAGE, syntax="proto3"
    )
    for name in MESSAGES:
        msg = fdp.message_type.add(name=name)
        # a quantity also carries the form Go holds it in (kubeacc.engine.celquantity)
        for number, field_name in enumerate(("value", "rep") if name == "Quantity" else ("value",)):
            msg.field.add(
                name=field_name,
                number=number + 1,
                type=descriptor_pb2.FieldDescriptorProto.TYPE_STRING,
                label=descriptor_pb2.FieldDescriptorProto.LABEL_OPTIONAL,
            )
    p = descriptor_pool.DescriptorPool()
    p.Add(fdp)
    return p


@cache
def message_class(name: str) -> Any:
    return message_factory.GetMessageClass(pool().FindMessageTypeByName(f"{PACKAGE}.{name}"))


def opaque(name: str, value: str) -> Any:
    return message_class(name)(value=value)


def qvalue(q: Fraction, rep: str = INT) -> Any:
    """A quantity's message: its value, and the form Go holds it in (``rep``, from
    :func:`kubeacc.engine.celquantity.go_rep` of the text it was read from)."""
    return message_class("Quantity")(value=str(q), rep=rep)


def svalue(v: Semver) -> Any:
    return opaque("Semver", str(v))


def _fail(msg: str) -> KubernetesCelError:
    return KubernetesCelError(msg)


# -- quantity ------------------------------------------------------------------------------


def _q(x: Any) -> Fraction:
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    return _fraction(x.value)


@lru_cache(maxsize=4096)
def _fraction(canonical: str) -> Fraction:
    return Fraction(canonical)


#: literal arguments repeat on every device a selector runs on; the messages are never
#: modified, so one per literal is shared
@lru_cache(maxsize=4096)
def _quantity(s: str) -> Any:
    try:
        return qvalue(parse_quantity(s), go_rep(s))
    except QuantityError as e:
        raise _fail(str(e)) from None


def _as_integer(q: Any) -> int:
    v = as_int64(_q(q), q.rep)
    if v is None:
        raise _fail("cannot convert value to integer")
    return v


def _is_integer(q: Any) -> bool:
    return as_int64(_q(q), q.rep) is not None


def _add(a: Any, b: Any, sign: int = 1) -> Any:
    """``add``/``sub`` (``sign`` -1) of a quantity and a quantity or an int, in Go's form."""
    x = _q(a)
    if isinstance(b, int):
        y, b_rep = Fraction(b), INT
    else:
        y, b_rep = _q(b), b.rep
    return qvalue(x + sign * y, add_rep(x, a.rep, sign * y, b_rep))


def _cmp(a: Fraction | Semver, b: Fraction | Semver) -> int:
    if isinstance(a, Semver) and isinstance(b, Semver):
        return a.compare(b)
    assert isinstance(a, Fraction) and isinstance(b, Fraction)
    # cross-multiplied integers: the same order as Fraction's operators, at a third of the
    # cost (selectors compare capacities on every device they see; denominators are positive)
    x, y = a.numerator * b.denominator, b.numerator * a.denominator
    return (x > y) - (x < y)


# -- semver --------------------------------------------------------------------------------


@lru_cache(maxsize=4096)
def _semver(s: str, normalize: bool = False) -> Any:
    try:
        return svalue(parse_semver(s, normalize))
    except SemverError as e:
        raise _fail(str(e)) from None


@lru_cache(maxsize=4096)
def _parsed_semver(canonical: str) -> Semver:
    return parse_semver(canonical)


def _sv(x: Any) -> Semver:
    return _parsed_semver(x.value)


# -- regex ---------------------------------------------------------------------------------


#: what Python's ``re`` accepts and RE2 (kube-scheduler's engine) refuses: look-around and
#: backreferences
_NOT_RE2 = re.compile(r"\(\?<?[=!]|\\[1-9]|\(\?P=")


@lru_cache(maxsize=1024)
def _regex(pattern: str) -> re.Pattern[str]:
    if _NOT_RE2.search(pattern):
        raise _fail(f"invalid regex {pattern!r}: look-around and backreferences are not RE2")
    try:
        return re.compile(pattern)
    except re.error as e:
        raise _fail(f"invalid regex {pattern!r}: {e}") from None


def _find(s: str, pattern: str) -> str:
    m = _regex(pattern).search(s)
    return m.group(0) if m else ""


def _find_all(s: str, pattern: str, limit: int = -1) -> list[str]:
    if limit == 0:
        return []
    found = [m.group(0) for m in _regex(pattern).finditer(s)]
    return found if limit < 0 else found[:limit]


# -- IP / CIDR -----------------------------------------------------------------------------


def _parse_ip(s: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    if "%" in s:
        raise _fail(f"IP address with zone value is not allowed: {s}")
    try:
        addr = ipaddress.ip_address(s)
    except ValueError:
        raise _fail(f"IP Address {s!r} parse error during conversion from string") from None
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        raise _fail(f"IPv4-mapped IPv6 address is not allowed: {s}")
    return addr


def _ip(s: str) -> Any:
    return opaque("IP", str(_parse_ip(s)))


def _ipv(x: Any) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    return ipaddress.ip_address(x.value)


def _parse_cidr(s: str) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    if "/" not in s:
        raise _fail(f"network address {s!r} parse error during conversion from string")
    addr, _, bits = s.partition("/")
    _parse_ip(addr)
    try:
        return ipaddress.ip_interface(f"{addr}/{int(bits)}")
    except ValueError:
        raise _fail(f"network address {s!r} parse error during conversion from string") from None


def _cidr(s: str) -> Any:
    return opaque("CIDR", str(_parse_cidr(s)))


def _accepts(parse: Callable[[str], object]) -> Callable[[str], bool]:
    """The ``isIP``/``isCIDR`` predicate of a parser: true when the string parses."""

    def check(s: str) -> bool:
        try:
            parse(s)
        except KubernetesCelError:
            return False
        return True

    return check


_is_ip = _accepts(_parse_ip)
_is_cidr = _accepts(_parse_cidr)


def _cv(x: Any) -> ipaddress.IPv4Interface | ipaddress.IPv6Interface:
    return ipaddress.ip_interface(x.value)


def _contains_ip(c: Any, ip: Any) -> bool:
    addr = _parse_ip(ip) if isinstance(ip, str) else _ipv(ip)
    return addr in _cv(c).network


def _contains_cidr(c: Any, other: Any) -> bool:
    o = _parse_cidr(other) if isinstance(other, str) else _cv(other)
    net = _cv(c).network
    return o.version == net.version and o.network.subnet_of(net)  # type: ignore[arg-type]


# -- URL -----------------------------------------------------------------------------------


def _parse_url(s: str) -> Any:
    parts = urlsplit(s)
    if not parts.scheme and not s.startswith("/"):
        raise _fail(f"URL {s!r} is not an absolute URI or absolute path")
    return parts


def _url(s: str) -> Any:
    _parse_url(s)
    return opaque("URL", s)


def _is_url(s: str) -> bool:
    try:
        _parse_url(s)
    except (KubernetesCelError, ValueError):
        return False
    return True


def _host(u: Any) -> str:
    return str(urlsplit(u.value).netloc.rpartition("@")[2])


def _hostname(u: Any) -> str:
    h = _host(u)
    if h.startswith("["):
        return h[1 : h.index("]")]
    return h.rpartition(":")[0] if ":" in h else h


def _port(u: Any) -> str:
    h = _host(u)
    tail = h[h.index("]") + 1 :] if h.startswith("[") else h
    return tail.rpartition(":")[2] if ":" in tail else ""


# -- Kubernetes list functions -------------------------------------------------------------


def _sorted(xs: list[Any]) -> bool:
    return all(a <= b for a, b in itertools.pairwise(xs))


def _nonempty(name: str, xs: list[Any]) -> list[Any]:
    if not xs:
        raise _fail(f"{name} called on empty list")
    return xs


def _equal(a: Any, b: Any) -> bool:
    """CEL equality of two element values: a bool never equals a number; quantities compare
    by value, whatever form Go holds them in (kubeacc.engine.celquantity)."""
    if _is_quantity(a) and _is_quantity(b):
        return _q(a) == _q(b)
    return isinstance(a, bool) == isinstance(b, bool) and bool(a == b)


def _is_quantity(x: Any) -> bool:
    desc = getattr(x, "DESCRIPTOR", None)
    return desc is not None and desc.name == "Quantity"


def _index_of(xs: list[Any], x: Any) -> int:
    return next((i for i, v in enumerate(xs) if _equal(v, x)), -1)


def _last_index_of(xs: list[Any], x: Any) -> int:
    return next((i for i in range(len(xs) - 1, -1, -1) if _equal(xs[i], x)), -1)


def _map_insert(m: dict[Any, Any], key: Any, *value: Any) -> dict[Any, Any]:
    """``cel.@mapInsert(map, key, value)`` and ``cel.@mapInsert(map, map)``: a new map; a key
    already present is an error, as in kube-scheduler."""
    updates = {key: value[0]} if value else key
    out = dict(m)
    for k, v in updates.items():
        if k in out:
            raise _fail(f"insert failed: key {k} already exists")
        out[k] = v
    return out


# -- declarations --------------------------------------------------------------------------

T = cel.Type


def _t(name: str) -> Any:
    return cel.Type(f"{PACKAGE}.{name}")


def _kind(t: Any) -> str:
    """What the runtime dispatches an argument on: lists, maps and messages by kind only."""
    if t.is_message():
        return "message"
    name: str = t.name()
    return name.partition("<")[0]


def _fn(name: str, *overloads: tuple[str, Any, list[Any], bool, Callable[..., Any]]) -> Any:
    """One function; the runtime tells overloads apart by argument kind only (every opaque
    value is a message), so overloads that differ in message type share one implementation,
    given once, which dispatches on the Python value."""
    seen: set[tuple[bool, tuple[str, ...]]] = set()
    decls = []
    for oid, ret, params, member, impl in overloads:
        kinds = (member, tuple(_kind(p) for p in params))
        if kinds in seen:
            decls.append(cel.Overload(oid, ret, params, is_member=member))
        else:
            seen.add(kinds)
            decls.append(cel.Overload(oid, ret, params, is_member=member, impl=impl))
    return cel.FunctionDecl(name, decls)


def _val(x: Any) -> Fraction | Semver:
    """A quantity or version message (or an int added to a quantity) as a Python value."""
    if isinstance(x, int) and not isinstance(x, bool):
        return Fraction(x)
    if x.DESCRIPTOR.name == "Semver":
        return _parsed_semver(x.value)
    return _fraction(x.value)


def _element_types() -> list[tuple[str, Any]]:
    """The element types ``indexOf`` of a list is declared for (kube-scheduler's is generic;
    the runtime here dispatches on the kind of each argument)."""
    named = [("int", T.INT), ("uint", T.UINT), ("double", T.DOUBLE), ("bool", T.BOOL)]
    named += [("string", T.STRING), ("bytes", T.BYTES), ("list", T.List(T.DYN))]
    named += [("map", T.Map(T.DYN, T.DYN)), ("null", T.NULL)]
    named += [("timestamp", T.TIMESTAMP), ("duration", T.DURATION)]
    return named + [(n.lower(), _t(n)) for n in OPAQUE]


def _renamed() -> list[Any]:
    """The functions calls reach through :mod:`kubeacc.engine.celrewrite`."""
    ip, cidr, m = _t("IP"), _t("CIDR"), T.Map(T.DYN, T.DYN)
    elems = _element_types()
    index_of = [(f"k_list_{n}_index_of", T.INT, [T.List(t), t], True, _index_of) for n, t in elems]
    last_index_of = [
        (f"k_list_{n}_last_index_of", T.INT, [T.List(t), t], True, _last_index_of) for n, t in elems
    ]
    keys = [("int", T.INT), ("uint", T.UINT), ("string", T.STRING), ("bool", T.BOOL)]
    inserts = [
        (f"k_map_insert_{kn}_{vn}", m, [m, kt, vt], False, _map_insert)
        for kn, kt in keys
        for vn, vt in elems
    ]
    inserts.append(("k_map_insert_map", m, [m, m], False, _map_insert))
    return [
        _fn(
            celrewrite.RENAMED["string"],
            ("k_ip_string", T.STRING, [ip], False, lambda a: a.value),
            ("k_cidr_string", T.STRING, [cidr], False, lambda a: a.value),
        ),
        _fn(celrewrite.RENAMED["indexOf"], *index_of),
        _fn(celrewrite.RENAMED["lastIndexOf"], *last_index_of),
        _fn(celrewrite.OWN_MAP_INSERT, *inserts),
    ]


def declarations() -> list[Any]:
    """Every Kubernetes library function as a declaration with its implementation."""
    q, sv, ip, cidr, url = (_t(n) for n in OPAQUE)
    s, i, b, d = T.STRING, T.INT, T.BOOL, T.DOUBLE
    ls, ld = T.List(T.STRING), T.List(T.DYN)
    fmt = _t(celformatlib.MESSAGE)
    return [
        *_renamed(),
        *celformatlib.declarations(lambda name: opaque(celformatlib.MESSAGE, name), fmt),
        _fn("quantity", ("k_quantity", q, [s], False, _quantity)),
        _fn("isQuantity", ("k_is_quantity", b, [s], False, is_quantity)),
        # a global function in kube-scheduler's library (``sign(q)``): ``q.sign()`` does not
        # compile there
        _fn("sign", ("k_q_sign", i, [q], False, lambda a: (_q(a) > 0) - (_q(a) < 0))),
        _fn("isInteger", ("k_q_is_integer", b, [q], True, _is_integer)),
        _fn("asInteger", ("k_q_as_integer", i, [q], True, _as_integer)),
        _fn("asApproximateFloat", ("k_q_as_float", d, [q], True, lambda a: float(_q(a)))),
        _fn(
            "add",
            ("k_q_add_q", q, [q, q], True, _add),
            ("k_q_add_int", q, [q, i], True, _add),
        ),
        _fn(
            "sub",
            ("k_q_sub_q", q, [q, q], True, lambda a, c: _add(a, c, -1)),
            ("k_q_sub_int", q, [q, i], True, lambda a, c: _add(a, c, -1)),
        ),
        _fn(
            "isLessThan",
            ("k_q_lt", b, [q, q], True, lambda a, c: _cmp(_val(a), _val(c)) < 0),
            ("k_sv_lt", b, [sv, sv], True, lambda a, c: _cmp(_val(a), _val(c)) < 0),
        ),
        _fn(
            "isGreaterThan",
            ("k_q_gt", b, [q, q], True, lambda a, c: _cmp(_val(a), _val(c)) > 0),
            ("k_sv_gt", b, [sv, sv], True, lambda a, c: _cmp(_val(a), _val(c)) > 0),
        ),
        _fn(
            "compareTo",
            ("k_q_cmp", i, [q, q], True, lambda a, c: _cmp(_val(a), _val(c))),
            ("k_sv_cmp", i, [sv, sv], True, lambda a, c: _cmp(_val(a), _val(c))),
        ),
        _fn(
            "semver",
            ("k_semver", sv, [s], False, _semver),
            ("k_semver_norm", sv, [s, b], False, _semver),
        ),
        _fn(
            "isSemver",
            ("k_is_semver", b, [s], False, is_semver),
            ("k_is_semver_norm", b, [s, b], False, is_semver),
        ),
        _fn("major", ("k_sv_major", i, [sv], True, lambda a: _sv(a).major)),
        _fn("minor", ("k_sv_minor", i, [sv], True, lambda a: _sv(a).minor)),
        _fn("patch", ("k_sv_patch", i, [sv], True, lambda a: _sv(a).patch)),
        _fn("find", ("k_find", s, [s, s], True, _find)),
        _fn(
            "findAll",
            ("k_find_all", ls, [s, s], True, _find_all),
            ("k_find_all_n", ls, [s, s, i], True, _find_all),
        ),
        _fn(
            "ip",
            ("k_ip", ip, [s], False, _ip),
            ("k_cidr_ip", ip, [cidr], True, lambda c: opaque("IP", str(_cv(c).ip))),
        ),
        _fn("isIP", ("k_is_ip", b, [s], False, _is_ip)),
        _fn(
            "ip.isCanonical",
            ("k_ip_canonical", b, [s], False, lambda a: str(_parse_ip(a)) == a),
        ),
        _fn("family", ("k_ip_family", i, [ip], True, lambda a: _ipv(a).version)),
        _fn("isUnspecified", ("k_ip_unspec", b, [ip], True, lambda a: _ipv(a).is_unspecified)),
        _fn("isLoopback", ("k_ip_loop", b, [ip], True, lambda a: _ipv(a).is_loopback)),
        _fn(
            "isLinkLocalMulticast",
            (
                "k_ip_llm",
                b,
                [ip],
                True,
                lambda a: (
                    (_ipv(a).is_multicast and _ipv(a).is_link_local)
                    or _ipv(a)
                    in ipaddress.ip_network("ff02::/16" if _ipv(a).version == 6 else "224.0.0.0/24")
                ),
            ),
        ),
        _fn(
            "isLinkLocalUnicast",
            (
                "k_ip_llu",
                b,
                [ip],
                True,
                lambda a: _ipv(a).is_link_local and not _ipv(a).is_multicast,
            ),
        ),
        _fn(
            "isGlobalUnicast",
            (
                "k_ip_gu",
                b,
                [ip],
                True,
                lambda a: (
                    not (
                        _ipv(a).is_unspecified
                        or _ipv(a).is_loopback
                        or _ipv(a).is_multicast
                        or _ipv(a).is_link_local
                        or str(_ipv(a)) == "255.255.255.255"
                    )
                ),
            ),
        ),
        _fn("cidr", ("k_cidr", cidr, [s], False, _cidr)),
        _fn("isCIDR", ("k_is_cidr", b, [s], False, _is_cidr)),
        _fn(
            "containsIP",
            ("k_cidr_contains_ip", b, [cidr, ip], True, _contains_ip),
            ("k_cidr_contains_ip_s", b, [cidr, s], True, _contains_ip),
        ),
        _fn(
            "containsCIDR",
            ("k_cidr_contains_cidr", b, [cidr, cidr], True, _contains_cidr),
            ("k_cidr_contains_cidr_s", b, [cidr, s], True, _contains_cidr),
        ),
        _fn(
            "masked",
            ("k_cidr_masked", cidr, [cidr], True, lambda c: opaque("CIDR", str(_cv(c).network))),
        ),
        _fn("prefixLength", ("k_cidr_prefix", i, [cidr], True, lambda c: _cv(c).network.prefixlen)),
        _fn("url", ("k_url", url, [s], False, _url)),
        _fn("isURL", ("k_is_url", b, [s], False, _is_url)),
        _fn("getScheme", ("k_url_scheme", s, [url], True, lambda u: urlsplit(u.value).scheme)),
        _fn("getHost", ("k_url_host", s, [url], True, _host)),
        _fn("getHostname", ("k_url_hostname", s, [url], True, _hostname)),
        _fn("getPort", ("k_url_port", s, [url], True, _port)),
        _fn("getEscapedPath", ("k_url_path", s, [url], True, lambda u: urlsplit(u.value).path)),
        _fn(
            "getQuery",
            (
                "k_url_query",
                T.Map(T.STRING, ls),
                [url],
                True,
                lambda u: parse_qs(urlsplit(u.value).query, keep_blank_values=True),
            ),
        ),
        _fn("isSorted", ("k_list_sorted", b, [ld], True, _sorted)),
        _fn("sum", ("k_list_sum", T.DYN, [ld], True, sum)),
        _fn("min", ("k_list_min", T.DYN, [ld], True, lambda xs: min(_nonempty("min", xs)))),
        _fn("max", ("k_list_max", T.DYN, [ld], True, lambda xs: max(_nonempty("max", xs)))),
    ]
