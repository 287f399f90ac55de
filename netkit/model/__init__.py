"""The pure model: Kubernetes objects as validated frozen values, and the node-local NodeState."""

from netkit.model.k8s import from_k8s, list_items
from netkit.model.state import (
    EndpointAddr,
    NodeInfo,
    NodeState,
    ServicePortName,
    ServicePortState,
    Traffic,
    Verdict,
    build,
)
from netkit.model.types import (
    EndpointSlice,
    IPFamily,
    Node,
    ObjectRef,
    Objects,
    Pod,
    Protocol,
    Service,
)

__all__ = [
    "EndpointAddr", "EndpointSlice", "IPFamily", "Node", "NodeInfo", "NodeState", "ObjectRef", "Objects",
    "Pod", "Protocol", "Service", "ServicePortName", "ServicePortState", "Traffic", "Verdict", "build", "from_k8s",
    "list_items",
]
