"""The nodes of a fault run: each node's synthetic host and the agent flags its claim kinds need.

A node is named by a host profile (:mod:`kubeacc.synthetic.profiles`) or by one of this module's
own hosts. What each gets beyond the plain agent:

- ``dgx-h100``: one GPU memory-shared (``--memory-shared``; the ``share`` kind) and the NICs'
  SR-IOV VFs published (``--dra-publish ... vf``; the ``nic`` kind takes a VF); GPU 7 is in MIG
  mode (the ``mig`` kind), without the three instances the profile's admin made: a reboot takes
  those and nothing here makes them again (an admin's MIG manager would at boot; kube-acc does
  not make instances it did not make), so a claim allocated one before a reboot could never be
  prepared after it (docs/testing.md, "Fault runner"). The node starts as after such a reboot,
  and the ``mig`` kind gets partitions the agent makes;
- ``fpga-arria``: two PAC Arria 10 cards, both empty, and a bitstream library holding one
  bitstream for them (``--bitstream-dir``, ``--simulate-kernel``: the synthetic kernel loads
  it); the ``fpga`` kind asks for that bitstream, which an AcceleratorPolicy allows
  (:func:`allow_bitstream`). Both cards the same model, so that any card the scheduler picks
  can carry it;
- ``l4-plugin``: the ``l4-pair`` host with its GPUs served by the device plugin
  (``--device-plugin-type=gpu``): the ``plugin`` kind's pods (``kubeacc.io/gpu``) run there
  through the device plugin, and through DRA's extended resources on the other GPU nodes;
- ``l4-extender``: the ``l4-pair`` host's GPUs shared through the device plugin for
  ``kubeacc extender``'s pods (the ``extender`` kind; tests/faults/extender.py).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from lightkube import Client
from lightkube.codecs import from_dict

from kubeacc.agent.dra.publishing import KINDS as PUBLISH_KINDS
from kubeacc.crds.api import API_VERSION
from kubeacc.node.operations.bitstreams import make_gbs
from kubeacc.synthetic import mig_state, profiles
from kubeacc.synthetic.fpga import ZERO_ID
from kubeacc.synthetic.hosts_fpga import PAC_ARRIA10, intel_fpga_server
from kubeacc.synthetic.tree import HostBuilder
from tests.faults import extender

#: The GPU the ``dgx-h100`` agent shares by memory (the ``share`` kind).
SHARED_BDF = "0000:1b:00.0"
FPGA_PROFILE = "fpga-arria"
PLUGIN_PROFILE = "l4-plugin"
#: The AFU the ``fpga`` kind's bitstream carries, and the bitstream's name in the library.
AFU = "5a5a5a5a00000000000000000000fa17"
BITSTREAM = "faults.gbs"
BITSTREAM_BYTES = make_gbs(AFU, PAC_ARRIA10.compat_id, b"faults" * 100, name="faults")
DIGEST = hashlib.sha256(BITSTREAM_BYTES).hexdigest()


@dataclass(frozen=True)
class NodeSetup:
    host: Path
    #: extra ``kubeacc agent`` flags
    agent_args: tuple[str, ...]


def build(name: str, profile: str, workdir: Path) -> NodeSetup:
    """Write the node's host under ``workdir`` and name the agent flags it runs with."""
    host = workdir / "host"
    if profile == FPGA_PROFILE:
        b = HostBuilder(host, seed=name)
        intel_fpga_server(b, name, ((PAC_ARRIA10, ZERO_ID), (PAC_ARRIA10, ZERO_ID)))
        b.mark(FPGA_PROFILE)
        library = workdir / "bitstreams"
        library.mkdir(parents=True, exist_ok=True)
        (library / BITSTREAM).write_bytes(BITSTREAM_BYTES)
        return NodeSetup(host, (f"--bitstream-dir={library}", "--simulate-kernel"))
    if profile == PLUGIN_PROFILE:
        profiles.build("l4-pair", host)
        return NodeSetup(host, ("--device-plugin-type=gpu",))
    if profile == extender.PROFILE:
        profiles.build("l4-pair", host)
        return NodeSetup(host, extender.agent_args(workdir))
    profiles.build(profile, host)
    if profile == "dgx-h100":
        mig_state.reboot(host)
        publish = tuple(f"--dra-publish={k}" for k in PUBLISH_KINDS)
        return NodeSetup(host, (f"--memory-shared=pci={SHARED_BDF}", *publish))
    return NodeSetup(host, ())


def allow_bitstream(client: Client) -> None:
    """The AcceleratorPolicy that lets FPGAs carry the ``fpga`` kind's bitstream."""
    client.create(
        from_dict(
            {
                "apiVersion": API_VERSION,
                "kind": "AcceleratorPolicy",
                "metadata": {"name": "faults-bitstream"},
                "spec": {
                    "selector": {"types": ["fpga"]},
                    "allowedBitstreams": [{"name": BITSTREAM, "sha256": DIGEST}],
                },
            }
        )
    )
