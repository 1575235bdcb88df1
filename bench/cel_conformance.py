"""Run the CEL conformance suite (cel-spec's tests/simple/testdata) against a CEL package.

Usage: ``python bench/cel_conformance.py --candidate cel-expr-python [--testdata DIR]``; the
test data is the ``cel.dev/expr`` Go module (``go mod download -json cel.dev/expr@v0.26.0``
prints its directory). Prints JSON: pass / fail / error counts per file and in total. A test
passes when the result equals the expected value (integers compared by value: the Python
packages return ``int`` for both ``int`` and ``uint``), or when an error is expected and the
package reports one at compile or evaluation time. Tests on protobuf messages need the
conformance protos, which no candidate here loads; they count as failures.
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys
from collections.abc import Callable
from typing import Any

sys.path.insert(0, os.path.dirname(__file__))
import textproto

Evaluator = Callable[[str, dict[str, Any], dict[str, Any]], Any]


class Unsupported(Exception):
    pass


def _one(msg: dict[str, list[Any]], key: str, default: Any = None) -> Any:
    v = msg.get(key)
    return v[-1] if v else default


def to_py(value: dict[str, list[Any]]) -> Any:
    """A cel.expr.Value message as a plain Python value."""
    if "null_value" in value:
        return None
    for k in ("bool_value", "int64_value", "uint64_value", "double_value"):
        if k in value:
            v = _one(value, k)
            return float(v) if k == "double_value" else v
    if "string_value" in value:
        return _one(value, "string_value").text
    if "bytes_value" in value:
        return bytes(_one(value, "bytes_value"))
    if "list_value" in value:
        return [to_py(v) for v in _one(value, "list_value").get("values", [])]
    if "map_value" in value:
        entries = _one(value, "map_value").get("entries", [])
        return {_key(to_py(_one(e, "key"))): to_py(_one(e, "value")) for e in entries}
    if "type_value" in value:
        return ("type", str(_one(value, "type_value").text))
    raise Unsupported(f"value kind {sorted(value)}")


def _key(k: Any) -> Any:
    return k


def same(a: Any, b: Any) -> bool:
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, float) and isinstance(b, float):
        return (math.isnan(a) and math.isnan(b)) or a == b
    if isinstance(a, float) != isinstance(b, float):
        return False
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(same(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(same(a[k], b[k]) for k in a)
    if isinstance(a, tuple) or isinstance(b, tuple):
        return False
    return bool(a == b)


def _bindings(test: dict[str, list[Any]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for b in test.get("bindings", []):
        expr_value = _one(b, "value")
        if "value" not in expr_value:
            raise Unsupported("binding without a value")
        out[_one(b, "key").text] = to_py(_one(expr_value, "value"))
    return out


def _type_env(test: dict[str, list[Any]]) -> dict[str, Any]:
    return {
        _one(d, "name").text: _one(d, "ident") for d in test.get("type_env", []) if "ident" in d
    }


# --- candidates ------------------------------------------------------------------------------


def cel_expr_python() -> Evaluator:
    from cel_expr_python import cel

    exts = [
        "strings",
        "optional",
        "bindings",
        "math",
        "lists",
        "sets",
        "encoders",
        "two-var-comprehensions",
        "protos",
        "regex",
    ]
    base = "name: conformance\nextensions:\n" + "".join(f"  - name: {e}\n" for e in exts)
    prims = {
        "INT64": cel.Type.INT,
        "UINT64": cel.Type.UINT,
        "STRING": cel.Type.STRING,
        "BOOL": cel.Type.BOOL,
        "DOUBLE": cel.Type.DOUBLE,
        "BYTES": cel.Type.BYTES,
    }

    def var_type(ident: dict[str, list[Any]]) -> Any:
        t = _one(ident, "type", {})
        p = _one(t, "primitive")
        return prims.get(str(p), cel.Type.DYN) if p is not None else cel.Type.DYN

    def run(expr: str, test: dict[str, Any], data: dict[str, Any]) -> Any:
        variables = {k: var_type(v) for k, v in test["env"].items()}
        for k in data:
            variables.setdefault(k, cel.Type.DYN)
        env = cel.NewEnv(
            config=cel.NewEnvConfigFromYaml(base),
            variables=variables,
            container=test["container"] or None,
        )
        compiled = env.compile(expr, disable_check=test["disable_check"])
        return compiled.eval(data=data).plain_value()

    return run


def common_expression_language() -> Evaluator:
    import cel

    def run(expr: str, test: dict[str, Any], data: dict[str, Any]) -> Any:
        return cel.compile(expr).execute(cel.Context(variables=data))

    return run


def cel_python() -> Evaluator:
    import celpy

    env = celpy.Environment()

    def plain(v: Any) -> Any:
        if isinstance(v, Exception):
            raise v
        if isinstance(v, (bool, celpy.celtypes.BoolType)):
            return bool(v)
        if isinstance(v, int):
            return int(v)
        if isinstance(v, float):
            return float(v)
        if isinstance(v, str):
            return str(v)
        if isinstance(v, bytes):
            return bytes(v)
        if isinstance(v, list):
            return [plain(x) for x in v]
        if isinstance(v, dict):
            return {plain(k): plain(x) for k, x in v.items()}
        return v

    def run(expr: str, test: dict[str, Any], data: dict[str, Any]) -> Any:
        e = celpy.Environment(package=test["container"] or None) if test["container"] else env
        prog = e.program(e.compile(expr))
        return plain(prog.evaluate({k: celpy.json_to_cel(v) for k, v in data.items()}))

    return run


CANDIDATES: dict[str, Callable[[], Evaluator]] = {
    "cel-expr-python": cel_expr_python,
    "common-expression-language": common_expression_language,
    "cel-python": cel_python,
}


def run_suite(name: str, testdata: str) -> dict[str, Any]:
    evaluate = CANDIDATES[name]()
    files: dict[str, dict[str, int]] = {}
    for path in sorted(glob.glob(os.path.join(testdata, "*.textproto"))):
        counts = {"pass": 0, "fail": 0}
        with open(path, encoding="utf-8") as f:
            doc = textproto.parse(f.read())
        for section in doc.get("section", []):
            for test in section.get("test", []):
                counts["pass" if _passes(evaluate, test) else "fail"] += 1
        files[os.path.basename(path).removesuffix(".textproto")] = counts
    total = sum(c["pass"] + c["fail"] for c in files.values())
    passed = sum(c["pass"] for c in files.values())
    return {
        "candidate": name,
        "total": total,
        "pass": passed,
        "pass_rate": round(passed / total, 4),
        "files": files,
    }


def _passes(evaluate: Evaluator, test: dict[str, list[Any]]) -> bool:
    if _one(test, "check_only", False):
        return False  # type deduction tests need the checked AST, which no candidate exposes
    spec = {
        "env": _type_env(test),
        "container": _one(test, "container", b"").decode(),
        "disable_check": bool(_one(test, "disable_check", False)),
    }
    try:
        data = _bindings(test)
        want_error = "eval_error" in test or "any_eval_errors" in test
        want = None if want_error else to_py(_one(test, "value", {"bool_value": [True]}))
    except Unsupported:
        return False
    try:
        got = evaluate(_one(test, "expr").text, spec, data)
    except Exception:
        return want_error
    if want_error:
        return False
    return same(got, want)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--candidate", choices=sorted(CANDIDATES), required=True)
    ap.add_argument(
        "--testdata",
        default=os.path.expanduser("~/go/pkg/mod/cel.dev/expr@v0.26.0/tests/simple/testdata"),
    )
    ap.add_argument("--files", action="store_true", help="per-file counts")
    args = ap.parse_args()
    result = run_suite(args.candidate, args.testdata)
    if not args.files:
        result.pop("files")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
