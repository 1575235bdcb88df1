"""What one device-selector evaluation costs in each CEL package; prints JSON.

For each candidate installed in this Python: compile time of a selector and the time of one
evaluation against one device's prepared variables (the engine prepares them once per device
and reuses them), for a few selectors written as users write them. The engine's own
environment (kube-scheduler's libraries on ``cel-expr-python``) is measured through
:mod:`kubeacc.engine.celenv` when kube-acc is importable.

``--cost`` measures instead what counting kube-scheduler's runtime cost costs
(:mod:`kubeacc.engine.celcount`): for ordinary selectors, that they are not rewritten; for
heavy ones, one evaluation counted and the same expression evaluated uncounted.

Run: ``python bench/cel_eval.py [--rounds N] [--cost]``.
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


#: selectors far over the cost limit's 10 % (rewritten to count), and what they do
HEAVY = {
    "stops_early": "lists.range(400).all(i, lists.range(400).all(j, j < i || i == 0))",
    "nested_under_limit": "lists.range(90).all(i, lists.range(90).all(j, [i, j].size() == 2))",
    "over_limit_in_loop": "lists.range(9000).all(i, " + "[" + ", ".join(["[i]"] * 9) + "]"
    ".size() == 9)",
    "map_refused_at_range": "lists.range(100000).map(i, i * 2).size() > 0",
}


def cost_counting(rounds: int) -> dict[str, Any]:
    """Per selector: rewritten or not, and one evaluation counted vs uncounted (µs)."""
    from kubeacc.engine import celenv
    from kubeacc.engine.celenv import CelError, DeviceEnv, compile_selector

    dev = DeviceEnv(DEVICE)
    act = dev._activation(compile_selector("true"))
    out: dict[str, Any] = {}

    def run(fn: Callable[[], Any]) -> Callable[[], Any]:
        def go() -> Any:
            try:
                return fn()
            except (CelError, RuntimeError) as e:
                return e

        return go

    for name, expr in {**SELECTORS, **HEAVY}.items():
        sel = compile_selector(expr)
        plain = celenv._check(expr)
        n = rounds if name in SELECTORS else max(3, rounds // 2000)
        out[name] = {
            "rewritten": sel.base_cost is not None,
            "counted_us": round(_time(run(lambda s=sel: dev.matches(s)), n) * 1e6, 2),
            "uncounted_us": round(_time(run(lambda p=plain: p.eval(act)), n) * 1e6, 2),
            "rounds": n,
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
    ap.add_argument("--cost", action="store_true", help="what counting the cost limit costs")
    args = ap.parse_args()
    if args.cost:
        print(json.dumps({"cost_counting": cost_counting(args.rounds)}, indent=2))
        return
    out: dict[str, Any] = {}
    for name, run in CANDIDATES.items():
        try:
            out[name] = run(args.rounds)
        except ImportError as e:
            out[name] = {"not_installed": str(e)}
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
