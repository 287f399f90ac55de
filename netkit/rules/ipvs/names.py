"""Kernel object names of the IPVS backend: one place, kube-proxy's names where kube-proxy has one.

ipset names are limited to 31 characters (IPSET_MAXNAMELEN 32 with the NUL); the longest here,
`KUBE-6-LOAD-BALANCER-SOURCE-CIDR`, is 32 — kube-proxy's IPv6 prefix makes it one too long, so the
IPv6 names use `KUBE-6-` on the short ones and drop `SOURCE-` on that one (`KUBE-6-LOAD-BALANCER-SRC-CIDR`).
iptables chain names are limited to 28 characters; every chain here is shorter.
"""

from __future__ import annotations

from netkit.model import IPFamily

INTERFACE = "kube-ipvs0"  # the dummy interface holding every service IP as a /32 or /128

# IPVS fwmark services of netkit carry this value in the high 16 bits ("NK"); the low 14 bits
# number the service (bit 14 is the masquerade bit, bit 15 stays free).
FWMARK_BASE = 0x4E4B0000
FWMARK_HIGH = 0xFFFF0000
FWMARK_SLOTS = 0x4000

# sets: (kube-proxy name, type, comment)
CLUSTER_IP = "KUBE-CLUSTER-IP"
EXTERNAL_IP = "KUBE-EXTERNAL-IP"
EXTERNAL_IP_LOCAL = "KUBE-EXTERNAL-IP-LOCAL"
LOAD_BALANCER = "KUBE-LOAD-BALANCER"
LOAD_BALANCER_LOCAL = "KUBE-LOAD-BALANCER-LOCAL"
LOAD_BALANCER_FW = "KUBE-LOAD-BALANCER-FW"
LOAD_BALANCER_SOURCE_CIDR = "KUBE-LOAD-BALANCER-SOURCE-CIDR"
LOOP_BACK = "KUBE-LOOP-BACK"
NODE_PORT = "KUBE-NODE-PORT-{proto}"  # TCP, UDP, SCTP
NODE_PORT_LOCAL = "KUBE-NODE-PORT-LOCAL-{proto}"
HEALTH_CHECK_NODE_PORT = "KUBE-HEALTH-CHECK-NODE-PORT"
IPVS_IPS = "KUBE-IPVS-IPS"
NO_ENDPOINTS = "KUBE-NO-ENDPOINTS"  # netkit's own: rejected in filter before IPVS sees the packet

SET_TYPES: dict[str, tuple[str, str]] = {
    CLUSTER_IP: ("hash:ip,port", "Kubernetes service cluster ip + port for masquerade purpose"),
    EXTERNAL_IP: ("hash:ip,port", "Kubernetes service external ip + port for masquerade and filter purpose"),
    EXTERNAL_IP_LOCAL: ("hash:ip,port",
                        "Kubernetes service external ip + port with externalTrafficPolicy=local"),
    LOAD_BALANCER: ("hash:ip,port", "Kubernetes service lb portal"),
    LOAD_BALANCER_LOCAL: ("hash:ip,port",
                          "Kubernetes service load balancer ip + port with externalTrafficPolicy=local"),
    LOAD_BALANCER_FW: ("hash:ip,port",
                       "Kubernetes service load balancer ip + port for load balancer with sourceRange"),
    LOAD_BALANCER_SOURCE_CIDR: ("hash:ip,port,net",
                                "Kubernetes service load balancer ip + port + source cidr for packet filter purpose"),
    LOOP_BACK: ("hash:ip,port,ip", "Kubernetes endpoints dst ip:port, source ip for solving hairpin purpose"),
    HEALTH_CHECK_NODE_PORT: ("bitmap:port", "Kubernetes health check node port"),
    IPVS_IPS: ("hash:ip", "Kubernetes service cluster ip and external ips (every kube-ipvs0 address)"),
    NO_ENDPOINTS: ("hash:ip,port", "Kubernetes service ip + port without endpoints, rejected before IPVS"),
    **{NODE_PORT.format(proto=p): ("bitmap:port", f"Kubernetes nodeport {p} port for masquerade purpose")
       for p in ("TCP", "UDP", "SCTP")},
    **{NODE_PORT_LOCAL.format(proto=p): ("bitmap:port",
                                         f"Kubernetes nodeport {p} port with externalTrafficPolicy=local")
       for p in ("TCP", "UDP", "SCTP")},
}


def set_name(base: str, family: IPFamily) -> str:
    """kube-proxy's IPv6 set names: `KUBE-6-` instead of `KUBE-` (shortened to fit 31 characters)."""
    if family is IPFamily.IPV4:
        return base
    name = "KUBE-6-" + base.removeprefix("KUBE-")
    return name.replace("SOURCE-CIDR", "SRC-CIDR") if len(name) > 31 else name


def is_ours(name: str) -> bool:
    return name in SET_TYPES or any(set_name(base, IPFamily.IPV6) == name for base in SET_TYPES)


# iptables chains (nat unless noted)
SERVICES = "KUBE-SERVICES"
POSTROUTING = "KUBE-POSTROUTING"
NODE_PORT_CHAIN = "KUBE-NODE-PORT"  # in nat and filter
LOAD_BALANCER_CHAIN = "KUBE-LOAD-BALANCER"
MARK_MASQ = "KUBE-MARK-MASQ"
FORWARD = "KUBE-FORWARD"  # filter
PROXY_FIREWALL = "KUBE-PROXY-FIREWALL"  # filter
SOURCE_RANGES_FIREWALL = "KUBE-SOURCE-RANGES-FIREWALL"  # filter
IPVS_FILTER = "KUBE-IPVS-FILTER"  # filter
INTERNAL_MARK = "KUBE-IPVS-INTERNAL"  # mangle: marks in-cluster traffic to eTP=Local external addresses

# Every iptables chain of the IPVS layout, per table: a dump reads only these (and the built-in
# chains, for the entry jumps), so no plan and no cleanup of IPVS mode can touch anyone else's.
CHAINS: dict[str, tuple[str, ...]] = {
    "mangle": (INTERNAL_MARK,),
    "filter": (FORWARD, NODE_PORT_CHAIN, PROXY_FIREWALL, SOURCE_RANGES_FIREWALL, IPVS_FILTER),
    "nat": (SERVICES, POSTROUTING, NODE_PORT_CHAIN, LOAD_BALANCER_CHAIN, MARK_MASQ),
}
_ALL_CHAINS = frozenset(c for chains in CHAINS.values() for c in chains)


def is_ipvs_chain(chain: str) -> bool:
    """An iptables chain IPVS mode writes (and may flush, rewrite or delete)."""
    return chain in _ALL_CHAINS
