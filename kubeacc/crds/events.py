"""Core/v1 Events about kube-acc's objects, recorded by every component (no pydantic: the node
agent records them too)."""

from __future__ import annotations

import datetime as dt
import logging
from typing import Any

import httpx2
from lightkube import ApiError, Client
from lightkube.models.core_v1 import EventSource, ObjectReference
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Event

log = logging.getLogger(__name__)


def emit_event(
    client: Client,
    obj: dict[str, Any],
    reason: str,
    message: str,
    *,
    warning: bool = False,
    component: str = "kubeacc-controller",
) -> None:
    """Record a core/v1 Event about ``obj``, and log it under ``component``'s name: the events
    are what a component did.

    Failures to record are logged, never raised.
    """
    meta = obj.get("metadata", {})
    namespace = meta.get("namespace") or "default"
    ref = f"{meta['namespace']}/{meta.get('name')}" if meta.get("namespace") else meta.get("name")
    logging.getLogger(component).log(
        logging.WARNING if warning else logging.INFO,
        "%s %s: %s: %s",
        obj.get("kind", "object"),
        ref,
        reason,
        message,
    )
    stamp = dt.datetime.now(dt.UTC)
    event = Event(
        metadata=ObjectMeta(generateName=f"{meta.get('name', 'kubeacc')}.", namespace=namespace),
        involvedObject=ObjectReference(
            apiVersion=obj.get("apiVersion"),
            kind=obj.get("kind"),
            name=meta.get("name"),
            namespace=meta.get("namespace"),
            uid=meta.get("uid"),
            resourceVersion=meta.get("resourceVersion"),
        ),
        reason=reason,
        message=message[:1024],
        type="Warning" if warning else "Normal",
        source=EventSource(component=component),
        firstTimestamp=stamp,
        lastTimestamp=stamp,
        count=1,
        reportingComponent=component,
    )
    try:
        client.create(event, namespace=namespace)
    except (ApiError, httpx2.HTTPError) as exc:  # refused, timed out, API server away
        log.warning("event %s on %s not recorded: %s", reason, meta.get("name"), exc)
