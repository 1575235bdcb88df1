"""What a namespace requires of its memory shares, read from the API server at each prepare or
Allocate (``kubeacc.io/share-enforcement`` on the Namespace; docs/sharing.md, "Untrusted
tenants"). Fail closed: a namespace that cannot be read refuses its shares."""

from __future__ import annotations

from lightkube import ApiError, Client
from lightkube.resources.core_v1 import Namespace

from kubeacc.node.sharelimit import Enforcement, Requirement, RequirementError, required_of


def namespace_requirement(client: Client) -> Requirement:
    """The requirement function of the agent's Limiter, reading through ``client``."""

    def required(namespace: str) -> Enforcement | None:
        try:
            ns = client.get(Namespace, namespace)
        except ApiError as exc:
            raise RequirementError(
                f"its labels could not be read ({exc.status.code} {exc.status.reason}): a "
                "share there is refused"
            ) from None
        except Exception as exc:  # the API server away: the prepare fails either way
            raise RequirementError(f"its labels could not be read ({exc})") from None
        return required_of(ns.metadata.labels if ns.metadata else None)

    return required
