"""Read a component's /metrics, /healthz and /readyz over HTTP, as Prometheus and the kubelet do."""

from __future__ import annotations

import urllib.error
import urllib.request

from prometheus_client.parser import text_string_to_metric_families


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as resp:
            return resp.status, resp.read().decode()
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode()
    except urllib.error.URLError as err:  # not listening (yet)
        return 0, str(err.reason)


def samples(port: int) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    """Every sample as (name, sorted labels) -> value."""
    code, text = get(port, "/metrics")
    assert code == 200, text
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            out[(s.name, tuple(sorted(s.labels.items())))] = s.value
    return out


def value(port: int, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` whose labels include ``labels`` (0 if none)."""
    want = set(labels.items())
    return sum(v for (n, ls), v in samples(port).items() if n == name and want <= set(ls))
