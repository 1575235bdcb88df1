"""The extender is ready only once its state holds what the LISTs returned (testbed).

A watch cache is synced as soon as its LIST arrives, before the extender's callback has built
the placement state from it, which takes seconds at 5,000 nodes. Verbs answered in between
would decide on an empty view (every node without GPUs), so readiness and the verbs wait for
the build. The test holds the build of the Accelerators' state at a known point (a State whose
``set_inventory`` waits) and checks what the extender says meanwhile.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest
from lightkube import Client

from kubeacc.extender.kube import Inventory
from kubeacc.extender.state import Gpu, State
from kubeacc.model import Device
from tests.crdfixtures import kubeacc_cleanup, kubeacc_crds, put_accelerator, wait_for

pytestmark = [pytest.mark.cluster, pytest.mark.usefixtures("kubeacc_crds", "kubeacc_cleanup")]

__all__ = ["kubeacc_cleanup", "kubeacc_crds"]  # the fixtures

NODE = "ready-ext-a"


class HeldState(State):
    """A State whose first build from the Accelerators' LIST waits for ``release``."""

    def __init__(self) -> None:
        super().__init__()
        self.building = threading.Event()
        self.release = threading.Event()

    def set_inventory(self, inventory: dict[str, list[Gpu]]) -> None:
        self.building.set()
        assert self.release.wait(60), "the test never released the build"
        super().set_inventory(inventory)


@pytest.fixture
def held(kube_client: Client) -> Iterator[tuple[Inventory, HeldState]]:
    state = HeldState()
    inventory = Inventory(kube_client, state)
    try:
        yield inventory, state
    finally:
        state.release.set()
        inventory.close()


def test_not_ready_until_the_state_is_built_from_the_lists(
    kube_client: Client, dgx: tuple[Device, ...], held: tuple[Inventory, HeldState]
) -> None:
    for dev in dgx[:4]:
        put_accelerator(kube_client, NODE, dev)
    inventory, state = held
    inventory.start()
    assert state.building.wait(60), "the Accelerators' LIST never reached the state"
    wait_for("the pods' LIST", inventory.pods_built.is_set, timeout=60)
    # Both caches have their LIST; the Accelerators' state is still being built.
    assert inventory.accelerators.synced.is_set() and inventory.pods.synced.is_set()
    assert len(inventory.accelerators.items()) == 4
    assert not inventory.synced()
    assert inventory.not_ready() == ["accelerators listed, state not built yet"]
    time.sleep(0.5)  # still held: nothing turns it ready behind the build's back
    assert not inventory.synced()
    state.release.set()
    wait_for("ready once the state is built", inventory.synced, timeout=30)
    assert inventory.not_ready() == []
    assert len(state.nodes[NODE].gpus) == 4
