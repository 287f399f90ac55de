"""Test doubles. Nothing here is a product path: the daemon never imports this package.

`netkit.testing.apiserver.TestApiServer` is an in-process Kubernetes API server that speaks the list and
watch protocol faithfully enough for netkit's reflector and for kubectl, with fault hooks (clean stream
end, dropped connections, compaction forcing 410, server down and back). With it the tests need no
cluster and no kube-apiserver (see docs/sources.md).
"""
