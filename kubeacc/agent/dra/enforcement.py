"""How a prepared claim's memory shares are enforced, read back from the CDI spec it was given."""

from __future__ import annotations

from kubeacc.agent.dra.checkpoint import PreparedClaim
from kubeacc.node.cdi import cdi_name
from kubeacc.node.sharelimit import ENV_ENFORCED, Enforcement


def claim_enforcement(uid: str, claim: PreparedClaim) -> dict[str, str]:
    """Device name -> how the claim's share of it is enforced, as its CDI spec says (a spec
    written before enforcement was recorded: advisory)."""
    envs = {
        d.get("name"): (d.get("containerEdits") or {}).get("env") or []
        for d in claim.cdi_spec.get("devices") or []
    }
    out = {}
    for dev in claim.devices:
        if dev.share_id:
            env = envs.get(cdi_name(uid, dev.device, dev.share_id), [])
            how = [e.split("=", 1)[1] for e in env if e.startswith(ENV_ENFORCED + "=")]
            out[dev.device] = how[-1] if how else Enforcement.ADVISORY.value
    return out
