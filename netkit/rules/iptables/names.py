"""Kernel object names of the iptables backend — kube-proxy's, so `iptables-save | grep KUBE-` works.

Per-service-port chains are a prefix plus `hash16(portName + proto)`; per-endpoint chains hash the
endpoint too. hash16 = the first 16 characters of the RFC 4648 base32 (A–Z, 2–7) encoding of the
SHA-256 digest. Length: iptables allows 28 characters for a chain name (XT_EXTENSION_MAXNAMELEN 29
with the NUL); the longest prefix `KUBE-SVC-` is 9, so 9 + 16 = 25 fits, and 16 base32 characters
keep 80 bits of the hash (collisions negligible at any cluster size).
"""

from __future__ import annotations

import hashlib
import re
from functools import lru_cache

from netkit.model import EndpointAddr, Protocol, ServicePortName

# Fixed chains netkit writes (all kube-proxy's names).
SERVICES = "KUBE-SERVICES"
EXTERNAL_SERVICES = "KUBE-EXTERNAL-SERVICES"
NODEPORTS = "KUBE-NODEPORTS"
POSTROUTING = "KUBE-POSTROUTING"
MARK_MASQ = "KUBE-MARK-MASQ"
FORWARD = "KUBE-FORWARD"
PROXY_FIREWALL = "KUBE-PROXY-FIREWALL"
CANARY = "KUBE-PROXY-CANARY"
# kubelet's chain (it wrote the same guard before kube-proxy did): netkit fills it when localhost
# NodePorts are on, and like kube-proxy never deletes it, so it is not in FIXED_CHAINS.
FIREWALL = "KUBE-FIREWALL"

FIXED_CHAINS = frozenset({SERVICES, EXTERNAL_SERVICES, NODEPORTS, POSTROUTING, MARK_MASQ, FORWARD,
                          PROXY_FIREWALL, CANARY})
SERVICE_CHAIN_PREFIXES = ("KUBE-SVC-", "KUBE-SVL-", "KUBE-EXT-", "KUBE-FW-", "KUBE-SEP-")
MAX_CHAIN_NAME = 28


_B32 = "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
_PAIRS = [a + b for a in _B32 for b in _B32]  # 10 bits → 2 characters


def hash16(text: str) -> str:
    """base32(sha256(text))[:16]: 16 characters = 80 bits = the first 10 bytes of the digest.
    (Equal to `base64.b32encode(digest)[:16]`, ~10× faster; a test checks they agree.)"""
    n = int.from_bytes(hashlib.sha256(text.encode()).digest()[:10], "big")
    return (_PAIRS[n >> 70] + _PAIRS[(n >> 60) & 1023] + _PAIRS[(n >> 50) & 1023] + _PAIRS[(n >> 40) & 1023]
            + _PAIRS[(n >> 30) & 1023] + _PAIRS[(n >> 20) & 1023] + _PAIRS[(n >> 10) & 1023] + _PAIRS[n & 1023])


@lru_cache(maxsize=65536)
def port_hash(name: str, proto: str) -> str:
    """The hash of a service port's chains, from its name ("ns/svc:port") and protocol ("tcp")."""
    return hash16(name + proto)


def service_chain(prefix: str, name: ServicePortName, protocol: Protocol) -> str:
    """KUBE-SVC-, KUBE-SVL-, KUBE-EXT- or KUBE-FW- + the port's hash."""
    return prefix + port_hash(str(name), protocol.lower)


def endpoint_chain(name: ServicePortName, protocol: Protocol, endpoint: EndpointAddr) -> str:
    return endpoint_chain_of(str(name), protocol.lower, str(endpoint))


def endpoint_chain_of(name: str, proto: str, endpoint: str) -> str:
    """The same from pre-rendered strings (the compiler's hot path renders each once)."""
    return "KUBE-SEP-" + hash16(name + proto + endpoint)


def is_owned(chain: str) -> bool:
    """A chain netkit (or kube-proxy before it) writes and may rewrite or delete."""
    return chain in FIXED_CHAINS or chain.startswith(SERVICE_CHAIN_PREFIXES)


# `is_owned` as one compiled pattern, for filtering 100k names in C (a test checks they agree).
OWNED = re.compile("|".join([*(re.escape(c) + r"\Z" for c in sorted(FIXED_CHAINS)),
                             *map(re.escape, SERVICE_CHAIN_PREFIXES)]))

# kube-proxy's optional nfacct counters (pkg/proxy/metrics); the rules count into those that exist.
CT_STATE_INVALID_DROPPED = "ct_state_invalid_dropped_pkts"
LOCALHOST_NODEPORTS_ACCEPTED = "localhost_nps_accepted_pkts"
NFACCT_COUNTERS = (CT_STATE_INVALID_DROPPED, LOCALHOST_NODEPORTS_ACCEPTED)
