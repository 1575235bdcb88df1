"""What one device-selector evaluation costs in each CEL package; prints JSON.

For each candidate installed in this Python: compile time of a selector and the time of one
evaluation against one device's prepared variables (the engine prepares them once per device
and reuses them), for a few selectors written as users write them. The engine's own
environment (kube-scheduler's libraries on ``cel-expr-python``) is measured through
:mod:`kubeacc.engine.celenv` when kube-acc is importable.

Run: ``python bench/cel_eval.py [--rounds N]``.
"""

from __future__ import annotations

import argparse
import json
import time
from collections.abc import Callable
from typing import Any

A = 'device.attributes["kubeacc.io"]'
SELECTORS = {
    "attribute": f'{A}.model == "h100"',
    "two_attributes": f'{A}.model != "a100" && {A}.numa == 1',
    "macro": f'["a100", "h100"].exists(m, m == {A}.model)',
}
DEVICE: dict[str, Any] = {
    "driver": "kubeacc.io",
    "attributes": {"kubeacc.io": {"model": "h100", "numa": 1, "index": 3}},
    "capacity": {},
    "allowMultipleAllocations": False,
}


def _time(fn: Callable[[], Any], rounds: int) -> float:
    fn()
    t = time.perf_counter()
    for _ in range(rounds):
        fn()
    return (time.perf_counter() - t) / rounds


def cel_expr_python(rounds: int) -> dict[str, Any]:
    from cel_expr_python import cel

    env = cel.NewEnv(variables={"device": cel.Type.Map(cel.Type.STRING, cel.Type.DYN)})
    act = env.Activation({"device": DEVICE})
    return _per_selector(env.compile, lambda program: program.eval(act), rounds)


def _per_selector(
    compile_: Callable[[str], Any], run: Callable[[Any], Any], rounds: int
) -> dict[str, Any]:
    """Compile and evaluation time of each selector with one implementation's two calls."""
    out = {}
    for name, expr in SELECTORS.items():
        program = compile_(expr)
        out[name] = {
            "compile_us": round(_time(lambda e=expr: compile_(e), rounds // 10) * 1e6, 1),
            "eval_us": round(_time(lambda p=program: run(p), rounds) * 1e6, 2),
        }
    return out


def common_expression_language(rounds: int) -> dict[str, Any]:
    import cel

    ctx = cel.Context(variables={"device": DEVICE})
    return _per_selector(cel.compile, lambda program: program.execute(ctx), rounds)


def cel_python(rounds: int) -> dict[str, Any]:
    import celpy

    env = celpy.Environment()
    act = {"device": celpy.json_to_cel(DEVICE)}
    out = {}
    for name, expr in SELECTORS.items():
        program = env.program(env.compile(expr))
        out[name] = {
            "compile_us": round(_time(lambda e=expr: env.compile(e), rounds // 100) * 1e6, 1),
            "eval_us": round(_time(lambda p=program: p.evaluate(act), rounds // 10) * 1e6, 2),
        }
    return out


def engine(rounds: int) -> dict[str, Any]:
    from kubeacc.engine.celenv import DeviceEnv, compile_cached, compile_selector

    dev = DeviceEnv(DEVICE)
    out = {}
    k8s = {
        **SELECTORS,
        "regex": f'{A}.model.find("[0-9]+") == "100"',
        "optional": f"{A}.?ecc.orValue(false) || {A}.numa == 1",
        "format_library": f"!format.dns1123Label().validate({A}.model).hasValue()",
    }
    for name, expr in k8s.items():
        sel = compile_selector(expr)
        out[name] = {
            "compile_us": round(
                _time(lambda e=expr: compile_cached.__wrapped__(e, False), rounds // 10) * 1e6, 1
            ),
            "eval_us": round(_time(lambda s=sel: dev.matches(s), rounds) * 1e6, 2),
        }
    return out


CANDIDATES = {
    "cel-expr-python": cel_expr_python,
    "common-expression-language": common_expression_language,
    "cel-python": cel_python,
    "kube-acc engine (cel-expr-python + Kubernetes libraries)": engine,
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--rounds", type=int, default=20000)
    args = ap.parse_args()
    out: dict[str, Any] = {}
    for name, run in CANDIDATES.items():
        try:
            out[name] = run(args.rounds)
        except ImportError as e:
            out[name] = {"not_installed": str(e)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
