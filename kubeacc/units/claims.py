"""A model preference as a DRA ResourceClaim: one ``firstAvailable`` request whose subrequests
are the models in order ("H100, else A100, else KunLun R200").

Each subrequest takes devices of the class ``accelerator.kubeacc.io`` (every whole kube-acc
device, never a MIG partition, so GPUs and XPUs can follow each other in one list) whose
``kubeacc.io/model`` matches the name by tokens, case-insensitively (the same rule as the
extender's ``prefer-models``). With a number of normalized units, each subrequest asks for as
many devices of its model as the unit table says are needed (``ceil(units / units per
device)``); the scheduler allocates the first subrequest that fits, on each node.
"""

from __future__ import annotations

import re
from typing import Any

from kubeacc.units.names import tokens
from kubeacc.units.prefer import Preference, parse_preference
from kubeacc.units.table import UnitTable, active_table

DEVICE_CLASS = "accelerator.kubeacc.io"
API_VERSION = "resource.k8s.io/v1"
#: A DRA request or subrequest name is a DNS label.
_LABEL = re.compile(r"[^a-z0-9]+")
_SEP = "[^a-z0-9]"
#: The API's limit on subrequests of one firstAvailable request.
MAX_SUBREQUESTS = 8


class ClaimSpecError(ValueError):
    pass


def model_selector(name: str) -> str:
    """CEL: the device's ``kubeacc.io/model`` contains the tokens of ``name``, in order."""
    toks = [re.escape(t) for t in tokens(name)]
    body = f"{_SEP}(.*{_SEP})?".join(toks)
    pattern = f"(?i)^(.*{_SEP})?{body}({_SEP}.*)?$"
    return f'device.attributes["kubeacc.io"].model.matches("{pattern}")'


def subrequest_name(name: str, used: set[str]) -> str:
    base = _LABEL.sub("-", name.lower()).strip("-")[:56] or "model"
    out, n = base, 2
    while out in used:
        out, n = f"{base}-{n}", n + 1
    used.add(out)
    return out


def preference_claim(
    name: str,
    prefer: Preference | str,
    *,
    count: int = 1,
    units: int | None = None,
    table: UnitTable | None = None,
    namespace: str | None = None,
    template: bool = False,
    request: str = "accelerators",
) -> dict[str, Any]:
    """A ResourceClaim (or ResourceClaimTemplate) for ``prefer``; :class:`ClaimSpecError`
    when a model has no unit table entry but units are asked, or the list is empty."""
    pref = parse_preference(prefer) if isinstance(prefer, str) else prefer
    if not pref.names:
        raise ClaimSpecError("name at least one model (e.g. 'H100,A100')")
    if count < 1:
        raise ClaimSpecError(f"count must be at least 1, not {count}")
    if units is not None and units < 1:
        raise ClaimSpecError(f"units must be at least 1, not {units}")
    if units is not None and pref.any_other:
        raise ClaimSpecError("'*' has no units per device: with units, name every model")
    t = table or active_table()
    used: set[str] = set()
    subs: list[dict[str, Any]] = []
    for model in pref.names:
        n = count
        if units is not None:
            entry = t.entry_for(model)
            if entry is None:
                raise ClaimSpecError(f"{model}: no entry in the unit table, so no device count")
            n = -(-units // entry.units)
        subs.append(
            {
                "name": subrequest_name(model, used),
                "deviceClassName": DEVICE_CLASS,
                "selectors": [{"cel": {"expression": model_selector(model)}}],
                "allocationMode": "ExactCount",
                "count": n,
            }
        )
    if pref.any_other:
        subs.append(
            {
                "name": subrequest_name("any", used),
                "deviceClassName": DEVICE_CLASS,
                "allocationMode": "ExactCount",
                "count": count,
            }
        )
    if len(subs) > MAX_SUBREQUESTS:
        raise ClaimSpecError(
            f"{len(subs)} models: a firstAvailable request takes at most {MAX_SUBREQUESTS}"
        )
    devices: dict[str, Any] = {"requests": [{"name": request, "firstAvailable": subs}]}
    if units is not None or count > 1:  # several devices: all of one model
        devices["constraints"] = [{"requests": [request], "matchAttribute": "kubeacc.io/model"}]
    spec = {"devices": devices}
    meta: dict[str, Any] = {"name": name}
    if namespace:
        meta["namespace"] = namespace
    if template:
        return {
            "apiVersion": API_VERSION,
            "kind": "ResourceClaimTemplate",
            "metadata": meta,
            "spec": {"spec": spec},
        }
    return {"apiVersion": API_VERSION, "kind": "ResourceClaim", "metadata": meta, "spec": spec}
