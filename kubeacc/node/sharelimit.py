"""How a GPU share's limits are enforced in its container, and the CDI edits that do it.

A memory share of an NVIDIA GPU is enforced by one of two means (docs/sharing.md):

* ``mps``: the GPU runs its CUDA MPS control daemon (GpuConfig strategy MPS); the MPS server
  holds each client to ``CUDA_MPS_PINNED_DEVICE_MEM_LIMIT`` and
  ``CUDA_MPS_ACTIVE_THREAD_PERCENTAGE``, which the share's environment sets.
* ``library``: kube-acc's share-limit library (``kubeacc/native/sharelimit.c``) is mounted
  read-only into the container and preloaded (``LD_PRELOAD``) into its processes; it holds
  the CUDA driver API's allocations to ``KUBEACC_DEVICE_MEMORY_LIMIT`` and reports the share as
  the device's memory. Compute (``kubeacc.io/cores``) is not limited by it. The container's
  processes keep one account in the agent's accounting service (:mod:`.shareaccount`), whose
  directory is mounted read-only into the container: no process there can rewrite or remove it.

Anything else is ``advisory``: the limits are in the environment, nothing holds the container
to them (AMD and KunLun shares, a node without the library, a class that turned it off).

The agent runs in a container: the CDI spec's ``hostPath`` must name a file of the host, so the
agent copies the library from its image into its state directory (a host path) at start.
"""

from __future__ import annotations

import hashlib
import logging
from collections.abc import Callable
from enum import StrEnum
from pathlib import Path

import msgspec

from kubeacc.node.hostcopy import install as install_native
from kubeacc.node.shareaccount import (
    CONTAINER_SOCKET,
    ENV_SOCKET,
    AccountError,
    AccountService,
    share_mount,
)

log = logging.getLogger(__name__)

LIBRARY_NAME = "libkubeacc-sharelimit.so"
#: Where the image carries the library (Containerfile).
IMAGE_LIBRARY = Path("/opt/kubeacc/native") / LIBRARY_NAME
#: Where a container finds it (mounted read-only).
CONTAINER_LIBRARY = "/usr/local/lib/kubeacc/" + LIBRARY_NAME
ENV_PRELOAD = "LD_PRELOAD"
#: Says in the container how its share is enforced (``library``, ``mps`` or ``advisory``).
ENV_ENFORCED = "KUBEACC_SHARE_ENFORCEMENT"
#: The slice attribute of a memory-shared GPU: what enforces its shares on the node.
SHARE_ENFORCEMENT_ATTR = "shareEnforcement"
#: The account names of DRA claims (``c-<uid>``) and device-plugin containers (``p-<hash>``).
CLAIM_ACCOUNT_PREFIX = "c-"
CONTAINER_ACCOUNT_PREFIX = "p-"


class EditsError(RuntimeError):
    """A share whose account could not be opened: the container must not start unenforced."""


def claim_account(uid: str) -> str:
    """The account of a claim's processes (every container of its pod)."""
    return CLAIM_ACCOUNT_PREFIX + uid


def container_account(pod: str, container: str) -> str:
    """The account of a device-plugin container (short: it names a socket's directory)."""
    return CONTAINER_ACCOUNT_PREFIX + hashlib.sha256(f"{pod}/{container}".encode()).hexdigest()[:32]


class Enforcement(StrEnum):
    LIBRARY = "library"
    MPS = "mps"
    ADVISORY = "advisory"


#: How strongly each means holds a container to its share: MPS holds it in the driver (the MPS
#: server), the library in the container's own processes (a process can leave it: unset
#: LD_PRELOAD, call the kernel driver), advisory not at all.
STRENGTH = {Enforcement.ADVISORY: 0, Enforcement.LIBRARY: 1, Enforcement.MPS: 2}
#: The Namespace label by which an admin requires shares in it to be enforced at least so
#: (``mps``: no user-space-only shares; ``library``: no advisory ones). Tenants with ``edit``
#: cannot change a Namespace's labels.
REQUIRED_LABEL = "kubeacc.io/share-enforcement"
#: A namespace's required enforcement (None: none); raises RequirementError when unknown.
Requirement = Callable[[str], "Enforcement | None"]


class RequirementError(RuntimeError):
    """A namespace's requirement could not be read or is not one kube-acc knows."""


def required_of(labels: dict[str, str] | None) -> Enforcement | None:
    """The requirement a Namespace's labels set (``REQUIRED_LABEL``)."""
    value = (labels or {}).get(REQUIRED_LABEL)
    if value is None:
        return None
    try:
        return Enforcement(value)
    except ValueError:
        raise RequirementError(
            f"label {REQUIRED_LABEL}={value!r}: expected one of "
            f"{', '.join(e.value for e in Enforcement)}"
        ) from None


def install(source: Path | None, state_dir: Path) -> Path | None:
    """Copy the library to ``<state-dir>/native`` (a host path); its path there, or None when
    there is no library to copy (shares are then advisory; logged once here)."""
    return install_native(source, IMAGE_LIBRARY, state_dir, "memory shares are advisory")


class Limiter(msgspec.Struct, frozen=True):
    """What a node can enforce shares with: the library's host path (None: not installed) and
    the accounting service of the containers' accounts (None: each process keeps its own,
    which holds only one process to the share)."""

    library: Path | None = None
    accounts: AccountService | None = None
    #: What each namespace requires of its shares (None: nothing is required).
    required: Requirement | None = None

    def enforcement(self, vendor: str, mps: bool, enforce: bool = True) -> Enforcement:
        """How a memory share of a GPU of ``vendor`` is enforced."""
        if vendor.lower() != "nvidia" or not enforce:
            return Enforcement.ADVISORY
        if mps:
            return Enforcement.MPS
        return Enforcement.LIBRARY if self.library is not None else Enforcement.ADVISORY

    def edits(
        self, how: Enforcement, account: str, limits: str
    ) -> tuple[dict[str, str], list[tuple[str, str]]]:
        """The environment and the read-only mounts (host, container) of a share enforced
        ``how``; ``account`` names the container's account (one per share, opened here in the
        accounting service with ``limits``, MiB per unit as ``KUBEACC_DEVICE_MEMORY_LIMIT``)."""
        env = {ENV_ENFORCED: how.value}
        if how is not Enforcement.LIBRARY or self.library is None:
            return env, []
        env[ENV_PRELOAD] = CONTAINER_LIBRARY
        mounts = [(str(self.library), CONTAINER_LIBRARY)]
        if self.accounts is not None:
            try:
                self.accounts.open(account, limits)
            except (AccountError, OSError) as exc:
                raise EditsError(f"the share's account {account}: {exc}") from None
            env[ENV_SOCKET] = CONTAINER_SOCKET
            mounts.append(share_mount(self.accounts.root, account))
        return env, mounts

    def refusal(self, namespace: str, how: Enforcement) -> str:
        """Why a share of ``namespace`` enforced ``how`` is refused ("" when it is not)."""
        if self.required is None:
            return ""
        try:
            need = self.required(namespace)
        except RequirementError as exc:
            return f"namespace {namespace}: {exc}"
        if need is None or STRENGTH[how] >= STRENGTH[need]:
            return ""
        hint = {
            Enforcement.MPS: "a DeviceClass whose GpuConfig sets sharing strategy MPS, a MIG "
            "device or a whole GPU",
            Enforcement.LIBRARY: "a class that does not turn enforcement off, on a node with "
            "the share-limit library",
        }.get(need, "")
        return (
            f"namespace {namespace} requires memory shares enforced by {need.value} (its label "
            f"{REQUIRED_LABEL}); this share would be enforced by {how.value}: use {hint}"
        )

    def close(self, account: str) -> None:
        """The share's container is gone: its account goes."""
        if self.accounts is not None:
            self.accounts.close(account)
