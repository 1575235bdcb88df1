"""The named formats' validators: validity and the API server's messages."""

from __future__ import annotations

import pytest

from kubeacc.engine.namedformats import FORMATS


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("dns1123Label", "my-name", []),
        ("dns1123Label", "a.b", ["must not contain dots"]),
        (
            "dns1123Label",
            "A",
            [
                "a lowercase RFC 1123 label must consist of lower case alphanumeric characters "
                "or '-', and must start and end with an alphanumeric character (e.g. 'my-name',"
                "  or '123-abc', regex used for validation is '[a-z0-9]([-a-z0-9]*[a-z0-9])?')"
            ],
        ),
        ("dns1123Label", "a" * 64, ["must be no more than 63 characters"]),
        ("labelValue", "a" * 64, ["must be no more than 63 bytes"]),
        ("qualifiedName", "/x", ["prefix part must be non-empty"]),
        (
            "qualifiedName",
            "example.com/",
            [
                "name part must be non-empty",
                "name part must consist of alphanumeric characters, '-', '_' or '.', and must "
                "start and end with an alphanumeric character (e.g. 'MyName',  or 'my.name',  "
                "or '123-abc', regex used for validation is "
                "'([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9]')",
            ],
        ),
        # a prefix's trailing dash stands for the generated suffix: two bytes become one letter
        ("dns1123LabelPrefix", "ab-", []),
        ("dns1123LabelPrefix", "a--", []),
        ("dns1123LabelPrefix", "-", FORMATS["dns1123Label"]("-")),
        ("dns1123Subdomain", "a\n", FORMATS["dns1123Subdomain"]("A")),
        ("uuid", "123E4567E89B12D3A456426614174000", []),
        ("byte", "", ["invalid base64"]),
        ("date", "2024-02-29", []),
        ("date", "2100-02-29", ["invalid date"]),
        ("datetime", "2024-02-29t23:59:59.5+01:00", []),
        ("datetime", "2024-02-29T24:00:00Z", ["invalid datetime"]),
        ("uri", "/a b", []),
        ("uri", "a b", ['parse "a b": invalid URI for request']),
        ("uri", "http://a:1:2/", ['parse "http://a:1:2/": invalid port ":1:2" after host']),
        ("uri", "foo://a:1:2/", []),
        ("uri", "http://h%41/", ['parse "http://h%41/": invalid URL escape "%41"']),
    ],
)
def test_validators(name: str, value: str, expected: list[str]) -> None:
    assert FORMATS[name](value) == expected
