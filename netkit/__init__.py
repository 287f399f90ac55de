"""netkit: a kube-proxy dataplane and Service-networking toolkit."""

__version__ = "0.1.0"
