"""Cost of device telemetry in the agent: CPU and RSS with sampling on vs off.

Prints one JSON object. Each mode runs in its own process on the synthetic 8-GPU host
(``dgx-h100``: 8 H100 with 18 NVLinks each, ConnectX-7 NICs), with what the agent holds
anyway (the inventory, its metrics registry, scraped every 15 s as Prometheus would):

* ``off``: no telemetry (``--telemetry-interval 0``);
* ``on``: the sampler at 10 s (the default) and at 1 s (to see the slope), every GPU held by a
  pod so that every series carries holder labels.

CPU is the process's user+system time over the measured window (after one warm-up pass),
as a share of one core; RSS is VmRSS at the end. Target: at the default 10 s interval,
telemetry adds < 1% of a core and < 5 MB RSS.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

TARGET_CPU_PERCENT = 1.0
TARGET_RSS_MB = 5.0
SCRAPE_S = 15.0


def _rss_kb() -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1])
    raise RuntimeError("no VmRSS")


def _cpu_s() -> float:
    ru = resource.getrusage(resource.RUSAGE_SELF)
    return ru.ru_utime + ru.ru_stime


def worker(root: str, interval: float, duration: float) -> dict[str, float]:
    """One agent-like process; telemetry off when ``interval`` is 0."""
    from prometheus_client import generate_latest

    from kubeacc.agent.runner import Agent  # noqa: F401 - the agent's own imports, both modes
    from kubeacc.discovery import discover
    from kubeacc.metrics.agent import AgentMetrics
    from kubeacc.synthetic.host import SyntheticHost

    host = SyntheticHost(root)
    inv = discover(host)
    metrics = AgentMetrics()
    metrics.observe_inventory(inv)
    sampler = None
    if interval > 0:
        from kubeacc.agent.telemetry.holders import Holder
        from kubeacc.agent.telemetry.sampler import TelemetrySampler

        gpus = [d.name for d in inv.devices if d.vendor == "NVIDIA"]
        held = {g: [Holder("team", f"pod-{n}", "main", "")] for n, g in enumerate(gpus)}
        sampler = TelemetrySampler(
            "node-1", host, host.nvml, lambda: inv, lambda: held, interval=interval
        )
        metrics.registry.register(sampler.collector)
        sampler.sample_once()  # warm-up: NVML opened, event set registered
    generate_latest(metrics.registry)
    start_cpu, start = _cpu_s(), time.monotonic()
    if sampler is not None:
        sampler.start()
    scrapes, size = 0, 0
    next_scrape = start
    while (now := time.monotonic()) < start + duration:
        if now >= next_scrape:
            size = len(generate_latest(metrics.registry))
            scrapes += 1
            next_scrape += SCRAPE_S
        time.sleep(min(0.5, max(0.0, next_scrape - now)))
    cpu = _cpu_s() - start_cpu
    elapsed = time.monotonic() - start
    if sampler is not None:
        sampler.stop()
    return {
        "cpu_percent": 100 * cpu / elapsed,
        "rss_mb": _rss_kb() / 1024,
        "passes": sampler.passes if sampler else 0,
        "cpu_ms_per_pass": 1000 * cpu / max(1, sampler.passes - 1) if sampler else 0.0,
        "scrape_bytes": size,
        "series": sum(
            1
            for line in generate_latest(metrics.registry).decode().splitlines()
            if line.startswith("kubeacc_device_")
        ),
    }


def _run(root: Path, interval: float, duration: float) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--worker", str(root), str(interval), str(duration)],
        check=True,
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
    )
    result: dict[str, float] = json.loads(out.stdout)
    return result


def main(duration: float = 60.0) -> dict[str, object]:
    from kubeacc.synthetic import profiles

    with tempfile.TemporaryDirectory() as tmp:
        root = profiles.build("dgx-h100", Path(tmp) / "dgx-h100")
        off = _run(root, 0, duration)
        on10 = _run(root, 10.0, duration)
        on1 = _run(root, 1.0, duration / 2)
    added_cpu = on10["cpu_percent"] - off["cpu_percent"]
    added_rss = on10["rss_mb"] - off["rss_mb"]
    r = {
        k: {n: round(v, 3) for n, v in d.items()}
        for k, d in (("off", off), ("on_10s", on10), ("on_1s", on1))
    }
    return {
        "benchmark": "telemetry",
        "profile": "dgx-h100",
        "window_s": duration,
        **r,
        "added_cpu_percent_10s": round(added_cpu, 3),
        "added_cpu_percent_1s": round(on1["cpu_percent"] - off["cpu_percent"], 3),
        "added_rss_mb_10s": round(added_rss, 2),
        "target_cpu_percent": TARGET_CPU_PERCENT,
        "target_rss_mb": TARGET_RSS_MB,
        "meets_target": added_cpu < TARGET_CPU_PERCENT and added_rss < TARGET_RSS_MB,
    }


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        print(json.dumps(worker(sys.argv[2], float(sys.argv[3]), float(sys.argv[4]))))
    else:
        print(json.dumps(main(float(sys.argv[1]) if len(sys.argv) > 1 else 60.0), indent=2))
