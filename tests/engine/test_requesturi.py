"""Request-URI parsing as ``format.uri()`` judges it."""

from __future__ import annotations

import pytest

from kubeacc.engine.requesturi import request_uri_error


@pytest.mark.parametrize(
    ("uri", "error"),
    [
        ("*", None),
        ("/a/b?q", None),
        ("mailto:x", None),  # opaque
        ("http://[::1]:80/", None),
        ("http://[fe80::1%25eth0]/", None),
        ("", "empty url"),
        ("a\tb", "net/url: invalid control character in URL"),
        (":x", "missing protocol scheme"),
        ("//host/p", None),  # a path for a request: no scheme, no authority
        ("http://[1.2.3.4]/", "invalid IP-literal"),
        ("http://a[b]/", "invalid IP-literal"),
        ("http://[::1/", "missing ']' in host"),
        ("http://h:8o/", 'invalid port ":8o" after host'),
        ("http://h x/", 'invalid character " " in host name'),
        ("http://u%zz@h/", 'invalid URL escape "%zz"'),
    ],
)
def test_request_uri(uri: str, error: str | None) -> None:
    got = request_uri_error(uri)
    if error is None:
        assert got is None
    else:
        assert got is not None and got.endswith(": " + error)
