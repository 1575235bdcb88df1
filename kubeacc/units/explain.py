"""Why a claim with a ``firstAvailable`` request got the model it got (``kubeacc plan``).

Before the claim is allocated, each of its subrequests is tried on its own (nothing
committed): the subrequests before the one the scheduler would take are named with the reason
they do not fit now, so "H100, else A100" reads "a100 on node b: h100 not available (node a:
need 2, have 1 ...)".
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from typing import Any

from kubeacc.engine.engine import Engine, Placement


def _first_available(claim: Mapping[str, Any]) -> list[tuple[int, str, list[dict[str, Any]]]]:
    reqs = ((claim.get("spec") or {}).get("devices") or {}).get("requests") or []
    return [
        (i, str(r.get("name", "")), list(r["firstAvailable"]))
        for i, r in enumerate(reqs)
        if isinstance(r, dict) and r.get("firstAvailable")
    ]


def _only(claim: Mapping[str, Any], index: int, sub: Mapping[str, Any]) -> dict[str, Any]:
    variant = copy.deepcopy(dict(claim))
    req = variant["spec"]["devices"]["requests"][index]
    exact = {k: v for k, v in sub.items() if k != "name"}
    variant["spec"]["devices"]["requests"][index] = {"name": req["name"], "exactly": exact}
    return variant


def why_not(engine: Engine, claim: Mapping[str, Any]) -> dict[str, dict[str, str]]:
    """Per firstAvailable request: subrequest -> "" (fits now) or why it does not."""
    out: dict[str, dict[str, str]] = {}
    start = engine._start  # trying must not move the round-robin start of the real plan
    try:
        for index, name, subs in _first_available(claim):
            answers: dict[str, str] = {}
            for sub in subs:
                tried = engine.allocate(_only(claim, index, sub), commit=False)
                expl = tried.explanation
                answers[str(sub.get("name"))] = (
                    "" if tried.ok else "; ".join(expl.lines()) if expl else "does not fit"
                )
            out[name] = answers
    finally:
        engine._start = start
    return out


def preference_lines(tried: Mapping[str, Mapping[str, str]], placement: Placement) -> list[str]:
    """Text for the plan: which subrequest (model) each request got, and why not the earlier."""
    got: dict[str, tuple[str, list[str]]] = {}
    if placement.allocation is not None:
        for r in placement.allocation["devices"]["results"]:
            req, _, sub = str(r["request"]).partition("/")
            got.setdefault(req, (sub, []))[1].append(f"{r['pool']}/{r['device']}")
    lines: list[str] = []
    for req, answers in tried.items():
        order = list(answers)
        if req in got:
            sub, devices = got[req]
            rank = order.index(sub) + 1 if sub in order else 0
            lines.append(
                f"{req}: {sub} (choice {rank} of {len(order)}) on {placement.node}: "
                f"{', '.join(devices)}"
            )
            before = order[: rank - 1] if rank else []
        else:
            lines.append(f"{req}: none of {', '.join(order)} fits")
            before = order
        for sub in before:
            why = answers[sub] or "fits alone, not beside the claim's other requests"
            lines.append(f"  {sub} not taken: {why}")
    return lines
