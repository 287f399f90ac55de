"""IPVS mode: Services as IPVS virtual servers, plus the ipsets and iptables rules IPVS still needs.

Theory of operation (the same pipeline as every backend):
- `compile.compile(state, config, family)` → `ruleset.Ruleset`: virtual servers (one per service
  IP/port/protocol and per node IP for NodePorts) with NAT real servers, the kube-ipvs0 addresses,
  kube-proxy's ipsets and the iptables payload. Pure.
- `plan.plan(committed, desired)` → `plan.Plan`: only the difference — addresses, set entries,
  virtual servers, real servers (graceful termination: a removed TCP real server with live
  connections is set to weight 0 and deleted by a later plan once it has none; UDP/SCTP at once),
  and the iptables payload only when its digest changed. Pure.
- `kernel.IPVSKernel`: dump (only what netkit owns) and apply through netlink (`netlink.py`, batched) plus
  `ip`, `ipset` and `iptables-restore`, optionally inside a named network namespace.
  `fake.FakeKernel` has the same semantics and refuses what the kernel refuses, for unit tests.

Ownership: a virtual server is netkit's when its address is on kube-ipvs0, when it is a NodePort
(its port is in netkit's KUBE-NODE-PORT-* set) or when it is a fwmark service in netkit's mark range.
Nothing else is ever read into a Ruleset, so no plan can touch it.
"""
