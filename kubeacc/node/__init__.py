"""What the node daemons (agent, device plugin, life-cycle agent) share, below all of them.

The kubelet's gRPC APIs (``kubeletapi``) and the serving of them (``rpc``, ``sockets``), CDI spec
files (``cdi``, ``atomic``), the driver's user space for containers (``userspace``), the
share-limit library (``sharelimit``, ``hostcopy``) and its containers' accounts
(``shareaccount``), node labels, supervised threads, and the operations on a device
(``operations``: reset, power, attach, detach, FPGA programming, MIG mode) that the life-cycle
agent runs for an Operation and the agent runs to program an FPGA for a claim.
"""
