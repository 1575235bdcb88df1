"""The error of a call that must fail, as the kubelet's gRPC client sees it."""

from __future__ import annotations

import grpc
import pytest


def refusal(
    call: grpc.UnaryUnaryMultiCallable, request: object, timeout: float = 60
) -> grpc.RpcError:
    with pytest.raises(grpc.RpcError) as err:
        call(request, timeout=timeout)
    return err.value
