"""Names of every object netkit writes into its nftables table.

A person reading `nft list table ip netkit` must be able to map each per-service object back to the
Kubernetes service port it was made for, so the names carry `ns/svc/proto/port` in clear, after a
short hash that keeps them unique whatever the readable part looks like:

    svc-<hash8>-<ns>/<svc>/<proto>/<port>        endpoints for Cluster policy (kube-proxy: KUBE-SVC)
    local-<hash8>-<ns>/<svc>/<proto>/<port>      endpoints on this node, Local policy (KUBE-SVL)
    ext-<hash8>-<ns>/<svc>/<proto>/<port>        external entry: masquerade / policy choice (KUBE-EXT)
    fw-<hash8>-<ns>/<svc>/<proto>/<port>         loadBalancerSourceRanges check (KUBE-FW)
    aff-<hash8>-<ns>/<svc>/<proto>/<port>__<ip>/<port>   ClientIP affinity set of one endpoint

`<port>` is the port's name, or its number when the port is unnamed (a port name must contain a
letter, so a number is never ambiguous). hash8 = base32(sha256(readable part))[:8], lower case, as
kube-proxy's nftables mode does; the readable part alone could collide only through the IPv6 rewrite
below, the hash never.

Length limit, derived: the kernel caps chain, set and map names at NFT_NAME_MAXLEN = 256 bytes
including the NUL (include/uapi/linux/netfilter/nf_tables.h, since Linux 4.14; 32 before). The
longest name is an affinity set: "aff-" 4 + hash 8 + "-" 1 + namespace 63 + "/" 1 + service 63 +
"/" 1 + protocol 4 + "/" 1 + port name 15 + "__" 2 + IPv6 address 39 + "/" 1 + port 5 = 208 < 255.
Kubernetes validates those parts (DNS labels, IANA service names), and `_SAFE` below re-checks the
alphabet, so no name can carry text that would change the meaning of an `nft -f` script.

nft's lexer accepts identifiers matching `[a-zA-Z_.][a-zA-Z0-9/\\-_.]*` without quotes; ':' is not in
that alphabet, so IPv6 addresses appear with '.' instead of ':' (`fd00..1`), which the hash keeps
unique.
"""

from __future__ import annotations

import base64
import hashlib
import re

from netkit.model import EndpointAddr, ServicePortState

TABLE = "netkit"

# Fixed maps and sets (the dispatch layer).
SERVICE_IPS = "service-ips"
SERVICE_NODEPORTS = "service-nodeports"
NO_ENDPOINT_SERVICES = "no-endpoint-services"
NO_ENDPOINT_NODEPORTS = "no-endpoint-nodeports"
FIREWALL_IPS = "firewall-ips"
CLUSTER_IPS = "cluster-ips"
NODEPORT_IPS = "nodeport-ips"
HAIRPIN = "hairpin-endpoints"
HEALTH_CHECK_NODEPORTS = "health-check-nodeports"

# Shared endpoint maps: `endpoints-<proto>-<shard>` (see layout.endpoint_slots).
ENDPOINTS = "endpoints"

# Fixed chains.
SERVICES = "services"
MASQUERADING = "masquerading"
MARK_FOR_MASQUERADE = "mark-for-masquerade"
FIREWALL_CHECK = "firewall-check"
SERVICE_ENDPOINTS_CHECK = "service-endpoints-check"
NODEPORT_ENDPOINTS_CHECK = "nodeport-endpoints-check"
CLUSTER_IPS_CHECK = "cluster-ips-check"
REJECT_CHAIN = "reject-chain"

# Prefixes of per-service-port objects, and what they are for.
KINDS = {"svc": "cluster endpoints", "local": "local endpoints", "ext": "external entry",
         "fw": "source ranges", "aff": "affinity"}

_SAFE = re.compile(r"^[a-zA-Z_.][a-zA-Z0-9/_.\-]*$")


def hash8(text: str) -> str:
    digest = hashlib.sha256(text.encode()).digest()
    return base64.b32encode(digest).decode()[:8].lower()


def port_label(p: ServicePortState) -> str:
    """`ns/svc/proto/port` — the readable part of every per-service-port name."""
    port = p.name.port or str(p.port)
    return f"{p.name.ref.namespace}/{p.name.ref.name}/{p.protocol.lower}/{port}"


def service_object(kind: str, p: ServicePortState) -> str:
    """The name of a per-service-port chain (kind svc, local, ext or fw)."""
    if kind not in KINDS:
        raise ValueError(f"unknown object kind {kind!r}")
    label = port_label(p)
    return checked(f"{kind}-{hash8(label)}-{label}")


def affinity_set(p: ServicePortState, ep: EndpointAddr) -> str:
    label = f"{port_label(p)}__{str(ep.ip).replace(':', '.')}/{ep.port}"
    return checked(f"aff-{hash8(label)}-{label}")


def endpoint_shard(protocol: str, shard: int) -> str:
    """A shared endpoint map: `endpoints-tcp-3f` (the protocol is part of the map's typeof)."""
    return f"{ENDPOINTS}-{protocol}-{shard:02x}"


def shard_protocol(name: str) -> str | None:
    """The protocol of a shared endpoint map's name, or None for any other name."""
    parts = name.split("-")
    return parts[1] if len(parts) == 3 and parts[0] == ENDPOINTS else None


def checked(name: str) -> str:
    if len(name) > 255 or not _SAFE.match(name):
        raise ValueError(f"{name!r} is not a valid nftables object name")
    return name


def split(name: str) -> tuple[str, str] | None:
    """(kind, `ns/svc:port/proto`) for a per-service-port object name, or None for a fixed one.

    The inverse a reader (or `summarize`) uses to map a kernel object back to its service port.
    """
    kind, sep, rest = name.partition("-")
    if kind not in KINDS or not sep:
        return None
    _, sep, label = rest.partition("-")
    parts = label.split("__")[0].split("/")
    if not sep or len(parts) != 4:
        return None
    ns, svc, proto, port = parts
    spn = f"{ns}/{svc}" if port.isdigit() else f"{ns}/{svc}:{port}"
    return kind, f"{spn}/{proto}"
