"""A namespace's required share enforcement, read from a real API server (the testbed) as the
agent reads it at prepare and Allocate."""

from __future__ import annotations

import pytest
from lightkube import Client
from lightkube.resources.core_v1 import Namespace

from kubeacc.agent.sharerequire import namespace_requirement
from kubeacc.node.sharelimit import REQUIRED_LABEL, Enforcement, RequirementError

pytestmark = pytest.mark.cluster


def test_the_label_says_what_a_namespace_requires(kube_client: Client, namespace: str) -> None:
    required = namespace_requirement(kube_client)
    assert required(namespace) is None
    for value, want in (("mps", Enforcement.MPS), ("library", Enforcement.LIBRARY)):
        kube_client.patch(Namespace, namespace, {"metadata": {"labels": {REQUIRED_LABEL: value}}})
        assert required(namespace) is want
    kube_client.patch(Namespace, namespace, {"metadata": {"labels": {REQUIRED_LABEL: "strong"}}})
    with pytest.raises(RequirementError, match="expected one of library, mps, advisory"):
        required(namespace)


def test_a_namespace_that_cannot_be_read_refuses(kube_client: Client) -> None:
    with pytest.raises(RequirementError, match="could not be read \\(404 NotFound\\)"):
        namespace_requirement(kube_client)("no-such-namespace-x")
