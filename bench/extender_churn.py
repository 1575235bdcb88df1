"""kubeacc extender: one pod's filter and prioritize after each bind, in-process.

Prints one JSON object. The extender's HTTP handler's steps (kept answer recalled or mended,
else the names decoded, the verb computed, its answer encoded and kept) without the sockets,
so the time is the extender's own: per pod of bench/extender.py, ``--rounds`` replicas are
each filtered and prioritized as kube-scheduler asks (prioritize with the nodes filter kept),
then placed on the node prioritize scored best, as bind does. Reported per verb: the median and
minimum milliseconds over the rounds after ``--warm`` and how many answers were given kept,
mended, or computed. Runs against whatever ``kubeacc`` is imported, so main's code can be timed
with ``PYTHONPATH=<main checkout>``.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import statistics
import time
from typing import Any

import msgspec
from extender import PODS, build_state, place_replica  # bench/ is the script's directory

from kubeacc.extender.namelists import NameLists
from kubeacc.extender.server import encode_answer, read_quick
from kubeacc.extender.service import Extender

#: The extender's counts that tell how an answer was given (0 in a build without them).
COUNTS = ("answers_mended", "answers_derived")


def answer(extender: Extender, lists: NameLists, verb: str, raw: bytes) -> tuple[bytes, str]:
    """The handler's way to ``verb``'s answer for ``raw`` and how it came: kept (as it was
    kept), mended (a kept one of the same names), derived (from a kept one of other names,
    kubeacc/extender/derive.py) or computed."""
    quick = read_quick(verb, raw)
    assert quick is not None
    args, names = quick
    assert names is not None
    counts = extender.counts
    before = [counts.get(k, 0) for k in COUNTS]
    kept = extender.recall(verb, args.get("Pod"), names)
    if isinstance(kept, bytes):
        mended, derived = (counts.get(k, 0) > n for k, n in zip(COUNTS, before, strict=True))
        return kept, "derived" if derived else "mended" if mended else "kept"
    args["NodeNames"] = lists.decode(names, keep=verb == "filter")
    handler = extender.filter if verb == "filter" else extender.prioritize_json
    out = encode_answer(verb, handler(args), lists)
    listed = args["NodeNames"] if verb == "filter" else None
    extender.keep(kept, out, listed)
    return out, "computed"


def measure(nodes: int, rounds: int, warm: int, label: str, seed: int) -> dict[str, Any]:
    state = build_state(nodes, seed)
    extender = Extender(state)
    lists = NameLists()
    names = sorted(state.nodes)
    pod = PODS[label]
    body = msgspec.json.encode({"Pod": pod, "NodeNames": names, "Nodes": None})
    times: dict[str, list[float]] = {"filter": [], "prioritize": []}
    how: dict[str, dict[str, int]] = {"filter": {}, "prioritize": {}}
    gc.collect()
    gc.freeze()
    for r in range(rounds + warm):
        t0 = time.perf_counter()
        filtered, fhow = answer(extender, lists, "filter", body)
        t1 = time.perf_counter()
        fit = msgspec.json.decode(filtered)["NodeNames"]
        prio = msgspec.json.encode({"Pod": pod, "NodeNames": fit, "Nodes": None})
        t2 = time.perf_counter()
        scores, phow = answer(extender, lists, "prioritize", prio)
        t3 = time.perf_counter()
        if r >= warm:
            times["filter"].append((t1 - t0) * 1000)
            times["prioritize"].append((t3 - t2) * 1000)
            for verb, got in (("filter", fhow), ("prioritize", phow)):
                how[verb][got] = how[verb].get(got, 0) + 1
        listed = msgspec.json.decode(scores)
        if listed:
            best = max(listed, key=lambda h: h["Score"])["Host"]
            replica = {**pod, "metadata": {**pod["metadata"], "uid": f"{label}-{r}"}}
            place_replica(extender, msgspec.json.encode({"Pod": replica, "Node": best}))
    return {
        verb: {
            "median_ms": round(statistics.median(values), 3),
            "min_ms": round(min(values), 3),
            "answers": how[verb],
        }
        for verb, values in times.items()
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=5000)
    ap.add_argument("--rounds", type=int, default=40)
    ap.add_argument("--warm", type=int, default=3)
    ap.add_argument("--seed", type=int, default=17)
    ap.add_argument("--pods", nargs="+", choices=list(PODS), default=["whole_4"])
    args = ap.parse_args()
    import kubeacc

    out: dict[str, Any] = {
        "benchmark": "extender_churn_inprocess",
        "kubeacc": os.path.dirname(kubeacc.__file__),
        "nodes": args.nodes,
        "load_1min": round(os.getloadavg()[0], 2),
    }
    for label in args.pods:
        out[label] = measure(args.nodes, args.rounds, args.warm, label, args.seed)
    print(json.dumps(out, indent=2))


if __name__ == "__main__":
    main()
