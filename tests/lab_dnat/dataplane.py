"""netkit's rules in a lab's node A, and the check that the kernel does what trace predicts.

A `Dataplane` is a running lab (netkit/lab) plus a backend: "legacy" or "nft" (the iptables mode
through iptables-legacy or iptables-nft) or "nftables" (the nftables mode). `apply()` compiles
manifests and writes them into node A exactly as `netkit apply` does (backend compile → plan against
a dump → kernel apply). `predict()` traces a packet, with that mode's tracer, over the LIVE ruleset
dumped back from node A — not over the compiled one — so a difference between what netkit meant to
write and what the kernel holds shows up too. Where the nftables mode means to answer a flow
differently, tests/nft_flows.py says so.

`expect_kernel_agrees(flow)` is the heart of the kernel tests: it sends the flow's packet through the
lab for real and checks, for both real sockets and Scapy probes sniffed at the backends:

- delivered flows: every backend reached is one trace predicted (by IP and, from probes, port); the
  spread over them fits trace's probabilities (chi-square, `assert_spread`); the source each backend
  saw is masqueraded (an address of node A) exactly where trace says so, else the client's own;
- ClientIP affinity (trace walked a `-m recent --set` or `update @aff-…` rule): one client always gets
  one backend;
- rejected flows: connection refused, at once (well below any timeout); probes reach no pod;
- dropped flows: the client times out; probes reach no pod and do not leave the node;
- untranslated flows: the packet leaves node A's uplink with its destination unchanged.
"""

from __future__ import annotations

import json
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import cached_property
from ipaddress import ip_address
from pathlib import Path
from typing import Any

from netkit.config import Config, parse_cidrs, parse_ips
from netkit.lab import Lab, Outcome, Probe, Reply, assert_spread
from netkit.model import IPFamily, build
from netkit.model.types import IPAddress
from netkit.rules.backend import Backend, Kernel
from netkit.rules.registry import backend as get_backend
from netkit.rules.tracing import Outcome as Predicted
from netkit.rules.tracing import Packet, endpoints
from netkit.sources.manifests import load
from tests.conftest import EXAMPLES
from tests.flows import Flow
from tests.nft_flows import expected

HERE = Path(__file__).resolve().parent
LAB_EDGE = HERE / "manifests" / "edge.yaml"
BACKENDS = ("legacy", "nft", "nftables")  # iptables-legacy, iptables-nft, the nftables mode
TOOLS = {"legacy": ("iptables-legacy-restore", "ip6tables-legacy-restore"),
         "nft": ("iptables-nft-restore", "ip6tables-nft-restore"), "nftables": ("nft",)}
UPLINK = "node-a:uplink-peer"  # where traffic leaving node A untranslated (to "the internet") shows up

SPREAD_CONNECTIONS = 240  # 3 endpoints: 80 expected each; "one gets all/nothing" gives p < 1e-30
FEW_CONNECTIONS = 20
PROBES = 12
DROP_TIMEOUT = 1.0
# A fair spread fails a chi-square test with probability ALPHA; about 40 spread checks run per suite,
# so keep it tiny. 240 connections where one endpoint gets nothing still give p < 1e-20.
ALPHA = 1e-6


def config(backend: str) -> Config:
    nftables = backend == "nftables"
    return Config(node_name="node-a", cluster_cidrs=parse_cidrs(["10.244.0.0/16", "fd00:244::/56"], "lab"),
                  node_ips=parse_ips(["192.0.2.10", "2001:db8:2::10"], "lab"),
                  mode="nftables" if nftables else "iptables", iptables_backend="auto" if nftables else backend)


@dataclass(frozen=True)
class Dataplane:
    lab: Lab
    backend: str

    @property
    def mode(self) -> str:
        return config(self.backend).mode

    @property
    def be(self) -> Backend:
        return get_backend(self.mode)

    def apply(self, *paths: Path) -> None:
        """Compile the manifests (plus examples/00-node.yaml) and write them into node A, both families."""
        cfg = config(self.backend)
        files = [str(EXAMPLES / "00-node.yaml"), *(str(p) for p in paths if p != EXAMPLES / "00-node.yaml")]
        state = build(load(files).objects, "node-a", cfg.node_ips)
        for family in (IPFamily.IPV4, IPFamily.IPV6):
            kernel = self.kernel(family)
            kernel.apply(self.be.plan(kernel.dump(), self.be.compile(state, cfg, family)))

    def kernel(self, family: IPFamily) -> Kernel:
        return self.be.kernel(config(self.backend), family, self.lab.node_a.netns)

    def live(self, family: IPFamily) -> Any:
        return self.kernel(family).dump()

    @cached_property
    def node_addresses(self) -> tuple[IPAddress, ...]:
        """Node A's own addresses (what `addrtype LOCAL` matches, and what masquerade picks from)."""
        out = self.lab.exec("node-a", ["ip", "-j", "addr", "show"]).stdout
        return tuple(ip_address(a["local"]) for link in json.loads(out) for a in link.get("addr_info", ()))

    def predict(self, src: str, dst: str, port: int, proto: str = "tcp") -> list[Predicted]:
        """trace() over the ruleset node A holds right now."""
        target = ip_address(dst)
        pkt = Packet(ip_address(src), target, port, proto, local_addresses=self.node_addresses)
        return self.be.trace(self.live(IPFamily.of(target)), pkt)  # type: ignore[attr-defined, no-any-return]

    # --- who sends ------------------------------------------------------------------------------

    def origin(self, src: str) -> tuple[str, str | None]:
        """(where, bind address) that sends from `src`: the client (bound to that address), a pod or
        node A (their own address)."""
        addr = ip_address(src)
        lab = self.lab
        if addr in lab.client.ipv4 or addr in lab.client.ipv6:
            return "client", src
        for pod in lab.pods:
            if addr in (pod.ipv4, pod.ipv6):
                return pod.name, None
        if addr in (lab.node_a.ipv4, lab.node_a.ipv6):
            return "node-a", None
        raise AssertionError(f"{src} is no address a lab sender owns")

    def pod_at(self, destination: str) -> str:
        """The pod owning a trace destination "IP:port" / "[IPv6]:port"."""
        host = ip_address(destination.rpartition(":")[0].strip("[]"))
        for pod in self.lab.pods:
            if host in (pod.ipv4, pod.ipv6):
                return pod.name
        raise AssertionError(f"trace predicted {destination}, which is no lab pod")

    # --- the kernel against the prediction --------------------------------------------------------

    def expect_kernel_agrees(self, flow: Flow) -> list[Predicted]:
        host, _, port_text = flow.dst.rpartition(":")
        dst, port = host.strip("[]"), int(port_text)
        flow = expected(flow, self.mode)
        predicted = self.predict(flow.src, dst, port, flow.proto)
        expect_prediction_matches(flow, predicted)
        where, bind = self.origin(flow.src)
        if flow.verdict == "reject":
            self.expect_refused(where, dst, port, flow.proto, bind)
        elif flow.verdict == "drop":
            self.expect_dropped(where, dst, port, flow.proto, bind)
        elif not endpoints(predicted):
            self.expect_untranslated(where, dst, port, flow.proto, bind)
        else:
            if flow.proto != "sctp":  # this kernel has no SCTP sockets: probes only
                self.expect_connections(flow.src, where, dst, port, flow.proto, bind, predicted)
            self.expect_probes(where, dst, port, flow.proto, bind, predicted)
        return predicted

    def expect_connections(self, src: str, where: str, dst: str, port: int, proto: str, bind: str | None,
                           predicted: list[Predicted]) -> list[Reply]:
        odds = {self.pod_at(d): p for d, p in endpoints(predicted).items()}
        count = SPREAD_CONNECTIONS if len(odds) > 1 else FEW_CONNECTIONS
        replies = self.lab.connect_many(where, dst, port, proto, src=bind, count=count)
        failed = Counter(r.outcome.name for r in replies if not r.answered)
        assert not failed, f"{where} → {dst}:{port}/{proto}: {dict(failed)} of {count} connections failed"
        if sticky(predicted):
            got = {r.backend for r in replies}
            assert len(got) == 1 and got <= odds.keys(), f"ClientIP affinity: one client reached {got}"
        else:
            assert_spread([r.backend for r in replies], odds, alpha=ALPHA)
        masq = masquerade_by_pod(self, predicted)
        for r in replies:
            assert r.backend is not None and r.source is not None
            self.expect_source(ip_address(src), r.source, masq[r.backend], f"{r.backend} saw {r.source}")
        return replies

    def expect_probes(self, where: str, dst: str, port: int, proto: str, bind: str | None,
                      predicted: list[Predicted]) -> tuple[Probe, ...]:
        allowed = {dest: o.masquerade for o in predicted if (dest := o.destination)}
        probes = self.lab.probes(where, dst, port, proto, src=bind, count=PROBES)
        for probe in probes:
            assert len(probe.seen) == 1, f"probe {probe.spec} seen at {probe.seen} (want exactly one backend)"
            (seen,) = probe.seen
            dest = f"[{seen.dst}]:{seen.dport}" if seen.dst.version == 6 else f"{seen.dst}:{seen.dport}"
            assert dest in allowed, f"probe DNATed to {dest}, trace predicted only {sorted(allowed)}"
            assert seen.where == self.pod_at(dest), f"{dest} arrived at {seen.where}"
            self.expect_source(probe.sent.src, seen.src, allowed[dest], f"probe to {dest} from {seen.src}")
        return probes

    def expect_source(self, sent: IPAddress, seen: IPAddress, masquerade: bool, what: str) -> None:
        node = self.node_addresses
        if masquerade:
            assert seen in node, f"{what}: trace predicted masquerade to a node address {node}"
            if sent not in node:
                assert seen != sent, f"{what}: not masqueraded"
        else:
            assert seen == sent, f"{what}: trace predicted the source {sent} preserved"

    def expect_refused(self, where: str, dst: str, port: int, proto: str, bind: str | None) -> None:
        reply = self.connect_while_probing(where, dst, port, proto, bind, timeout=3.0)
        assert reply.outcome is Outcome.REFUSED, f"trace predicted REJECT, the client got {reply.outcome.name}"
        # at once: before the first SYN retransmission (1 s), with room for a busy machine
        assert reply.seconds < 0.9, f"refused only after {reply.seconds:.2f}s: not at once"

    def expect_dropped(self, where: str, dst: str, port: int, proto: str, bind: str | None) -> None:
        reply = self.connect_while_probing(where, dst, port, proto, bind, timeout=DROP_TIMEOUT)
        assert reply.outcome is Outcome.TIMEOUT, f"trace predicted DROP, the client got {reply.outcome.name}"

    def connect_while_probing(self, where: str, dst: str, port: int, proto: str, bind: str | None, *,
                              timeout: float) -> Reply:
        """A real connection (on a thread) while a probe checks that nothing reaches a pod or leaves
        node A: a DROP costs one timeout, not two."""
        with ThreadPoolExecutor(1) as pool:
            reply = pool.submit(self.lab.connect, where, dst, port, proto, src=bind, timeout=timeout)
            at = [*(p.name for p in self.lab.pods), UPLINK]
            (probe,) = self.lab.probes(where, dst, port, proto, src=bind, at=at, timeout=0.5)
            assert not probe.seen, f"a rejected/dropped probe arrived at {probe.seen}"
            return reply.result()

    def expect_untranslated(self, where: str, dst: str, port: int, proto: str, bind: str | None) -> None:
        at = [*(p.name for p in self.lab.pods), UPLINK]
        (probe,) = self.lab.probes(where, dst, port, proto, src=bind, at=at)
        assert [(s.where, str(s.dst), s.dport) for s in probe.seen] == [(UPLINK, dst, port)], probe.seen


def expect_prediction_matches(flow: Flow, predicted: list[Predicted]) -> None:
    """trace over the live rules says what tests/flows.py says (the compiled-rules twin of this is
    tests/unit/test_trace.py)."""
    assert not [u for o in predicted for u in o.unknown], "trace did not understand a live rule"
    if flow.verdict != "accept":
        assert [o.verdict for o in predicted] == [flow.verdict], predicted
        return
    assert all(o.verdict == "accept" for o in predicted), predicted
    got = endpoints(predicted)
    assert got.keys() == flow.endpoints.keys(), got
    for dest, p in flow.endpoints.items():
        assert abs(got[dest] - p) < 1e-6, (dest, got[dest], p)
    if flow.masquerade is not None:
        assert all(o.masquerade is flow.masquerade for o in predicted), predicted


def sticky(predicted: list[Predicted]) -> bool:
    """Did the walk record the client for ClientIP affinity (iptables `-m recent --set`, nftables
    `update @aff-…`)?"""
    return any(("-m recent" in s.rule and "--set" in s.rule) or " update @" in f" {s.rule}"
               for o in predicted for s in o.steps)


def masquerade_by_pod(dp: Dataplane, predicted: list[Predicted]) -> dict[str, bool]:
    out: dict[str, bool] = {}
    for o in predicted:
        if o.destination:
            pod = dp.pod_at(o.destination)
            assert out.get(pod, o.masquerade) == o.masquerade, f"{pod}: masquerade depends on more than the pod"
            out[pod] = o.masquerade
    return out
