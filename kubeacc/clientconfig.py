"""Which cluster a command talks to: the kubeconfig resolved the way kubectl resolves it.

Order: ``--kubeconfig FILE``; else ``$KUBECONFIG`` (a ``:``-separated list, merged: the first
file to name a cluster, context or user wins, the first ``current-context`` wins, missing files
are skipped); else the pod's service account (in-cluster: ``$KUBERNETES_SERVICE_HOST`` and the
mounted token); else ``~/.kube/config``. Every failure to find or read a configuration is a
:class:`KubeconfigError` with a one-line message that says which file and what is wrong.
"""

from __future__ import annotations

import os
import ssl
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx2
import yaml
from lightkube import Client
from lightkube.config.client_adapter import verify_cluster
from lightkube.config.kubeconfig import KubeConfig, SingleConfig
from lightkube.config.models import User
from lightkube.core.exceptions import ConfigError

from kubeacc.retryafter import BUDGET, RetryAfterTransport

SERVICE_ACCOUNT_DIR = Path("/var/run/secrets/kubernetes.io/serviceaccount")
DEFAULT_KUBECONFIG = Path("~/.kube/config")
#: Keys of kubeconfig entries that name files, resolved against the file that holds them.
_PATH_KEYS = {
    "clusters": ("certificate-authority",),
    "users": ("client-certificate", "client-key", "tokenFile"),
}
_NAMED = {"clusters": "cluster", "contexts": "context", "users": "user"}


class KubeconfigError(Exception):
    """No usable cluster configuration; the message is one line, fit for the user."""


@dataclass(frozen=True)
class ResolvedConfig:
    config: KubeConfig
    #: Where it came from, for messages: a file path, "$KUBECONFIG=...", or "in-cluster".
    source: str


def resolve(
    flag: Path | None,
    *,
    environ: dict[str, str] | None = None,
    service_account_dir: Path = SERVICE_ACCOUNT_DIR,
) -> ResolvedConfig:
    """The configuration ``kubeacc`` uses, from ``flag`` or the environment (see module doc)."""
    env = os.environ if environ is None else environ
    if flag is not None:
        return ResolvedConfig(_load_files([flag], f"--kubeconfig {flag}"), str(flag))
    listed = env.get("KUBECONFIG", "")
    if listed:
        paths = [Path(p) for p in listed.split(os.pathsep) if p]
        source = f"$KUBECONFIG={listed}"
        existing = [p for p in paths if p.expanduser().is_file()]
        if not existing:
            raise KubeconfigError(f"{source}: no such file")
        return ResolvedConfig(_load_files(existing, source), source)
    if env.get("KUBERNETES_SERVICE_HOST") and (service_account_dir / "token").is_file():
        return ResolvedConfig(_in_cluster(service_account_dir, env), "in-cluster")
    home = Path(env.get("HOME", "~")) / ".kube" / "config"
    if home.expanduser().is_file():
        return ResolvedConfig(_load_files([home], str(home)), str(home))
    raise KubeconfigError(
        "no cluster configured: give --kubeconfig FILE, set $KUBECONFIG, run in a pod with a "
        f"service account, or create {home}"
    )


def make_client(
    flag: Path | None,
    field_manager: str | None = None,
    *,
    timeout: float | None = None,
    context: str | None = None,
    wait_budget: float = BUDGET,
) -> Client:
    """A lightkube client for the resolved configuration; bad configuration raises
    :class:`KubeconfigError` here, before any request is made. ``timeout``: per-request
    deadline in seconds (lightkube's default without). ``context``: the kubeconfig context to
    use instead of its ``current-context`` (``--context``). Answers with ``Retry-After`` (429
    from a busy API server) are waited out and sent again (:mod:`kubeacc.retryafter`)."""
    resolved = resolve(flag)
    try:
        single = _context(resolved, context)
        _check_files(single)
        tls = verify_cluster(single.cluster, single.user or User(), single.abs_file)
        transport = RetryAfterTransport(httpx2.HTTPTransport(verify=tls), budget=wait_budget)
        limit = None if timeout is None else httpx2.Timeout(timeout)
        return Client(single, field_manager=field_manager, timeout=limit, transport=transport)
    except (ConfigError, KeyError, TypeError, ValueError, OSError, ssl.SSLError) as exc:
        raise KubeconfigError(f"{resolved.source}: {_reason(exc)}") from exc


def _context(resolved: ResolvedConfig, name: str | None) -> SingleConfig:
    """The context ``name`` (default: the current one); an unknown name lists the known ones."""
    if name is not None and name not in resolved.config.contexts:
        known = ", ".join(sorted(resolved.config.contexts)) or "none"
        raise KubeconfigError(f"{resolved.source}: no context {name!r} (contexts: {known})")
    single = resolved.config.get(context_name=name)
    if single is None:
        raise KubeconfigError(f"{resolved.source}: no current-context; give --context NAME")
    return single


def _check_files(single: SingleConfig) -> None:
    """The files the context names exist (ssl would not say which one is missing)."""
    named = {"certificate-authority": single.cluster.certificate_auth}
    if single.user is not None:
        named |= {
            "client-certificate": single.user.client_cert,
            "client-key": single.user.client_key,
            "tokenFile": single.user.token_file,
        }
    for field, value in named.items():
        if value and not Path(single.abs_file(value)).is_file():
            raise FileNotFoundError(2, f"{field} {single.abs_file(value)}: no such file")


def _reason(exc: BaseException) -> str:
    if isinstance(exc, KeyError):
        return f"refers to {exc.args[0]!r}, which it does not define"
    if isinstance(exc, FileNotFoundError):
        return f"{exc.filename}: no such file" if exc.filename else str(exc.strerror)
    text = " ".join(str(exc).split())
    return text or type(exc).__name__


def _load_files(paths: list[Path], source: str) -> KubeConfig:
    merged: dict[str, Any] = {"clusters": [], "contexts": [], "users": []}
    seen: dict[str, set[str]] = {key: set() for key in _NAMED}
    for path in paths:
        doc = _read(path.expanduser(), source)
        if merged.get("current-context") is None and doc.get("current-context"):
            merged["current-context"] = doc["current-context"]
        for key, inner in _NAMED.items():
            entries = doc.get(key) or []
            if not isinstance(entries, list):
                raise KubeconfigError(f"{path}: {key} must be a list")
            for entry in entries:
                if not isinstance(entry, dict) or not isinstance(entry.get(inner), dict):
                    raise KubeconfigError(f"{path}: every item of {key} needs a name and {inner}")
                name = str(entry.get("name", ""))
                if name in seen[key]:
                    continue
                seen[key].add(name)
                merged[key].append(_absolute(entry, key, inner, path.expanduser().parent))
    if not merged["clusters"] or not merged["contexts"]:
        raise KubeconfigError(f"{source}: no clusters or no contexts defined")
    try:
        return KubeConfig.from_dict(merged, fname=paths[0].expanduser())
    except (KeyError, TypeError, ValueError) as exc:
        raise KubeconfigError(f"{source}: {_reason(exc)}") from exc


def _read(path: Path, source: str) -> dict[str, Any]:
    try:
        doc = yaml.safe_load(path.read_text())
    except FileNotFoundError as exc:
        raise KubeconfigError(f"{source}: no such file") from exc
    except IsADirectoryError as exc:
        raise KubeconfigError(f"{source}: is a directory, not a kubeconfig file") from exc
    except OSError as exc:
        raise KubeconfigError(f"{source}: {exc.strerror}") from exc
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" (line {mark.line + 1})" if mark is not None else ""
        raise KubeconfigError(f"{path}: not valid YAML{where}") from exc
    if not isinstance(doc, dict):
        raise KubeconfigError(f"{path}: not a kubeconfig (expected a mapping with clusters)")
    return doc


def _absolute(entry: dict[str, Any], key: str, inner: str, base: Path) -> dict[str, Any]:
    body = dict(entry[inner])
    for field in _PATH_KEYS.get(key, ()):
        value = body.get(field)
        if isinstance(value, str) and value and not Path(value).expanduser().is_absolute():
            body[field] = str(base / value)
    return {**entry, inner: body}


def _in_cluster(account: Path, env: dict[str, str] | os._Environ[str]) -> KubeConfig:
    host = env["KUBERNETES_SERVICE_HOST"]
    port = env.get("KUBERNETES_SERVICE_PORT", "443")
    if ":" in host:
        host = f"[{host}]"
    cluster: dict[str, Any] = {"server": f"https://{host}:{port}"}
    if (account / "ca.crt").is_file():
        cluster["certificate-authority"] = str(account / "ca.crt")
    context: dict[str, Any] = {"cluster": "in-cluster", "user": "in-cluster"}
    if (account / "namespace").is_file():
        context["namespace"] = (account / "namespace").read_text().strip()
    return KubeConfig.from_dict(
        {
            "current-context": "in-cluster",
            "clusters": [{"name": "in-cluster", "cluster": cluster}],
            "contexts": [{"name": "in-cluster", "context": context}],
            "users": [{"name": "in-cluster", "user": {"tokenFile": str(account / "token")}}],
        },
        fname=account / "token",
    )
