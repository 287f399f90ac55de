"""`netkit lab cluster`: a multi-node cluster dataplane in network namespaces, driven by kubectl.

Theory of operation, by module:

- `plan`: nodes, pods, namespace names and addresses; scheduling for scale and drain. Pure.
- `wiring`: the plan as sysctls and `ip -batch` lines per namespace and phase. Pure.
- `objects`: the Node, Pod and kube-dns Service objects the lab owns. Pure.
- `controller`: Services' selectors × Pods → EndpointSlices, as Kubernetes' controller. Pure.
- `deploy`: `netkit run`'s command line and files for a node, read from `deploy/`.
- `build`: namespaces in the kernel (with `netkit.lab.build`), pods' resolv.conf under /etc/netns.
- `echo`: the lab's answering servers for one pod, in the control plane's event loop.
- `controlplane`: the process that outlives `up`: API server, controller, pods, daemons, DNS.
- `state`: /run/netkit-lab/clusters/<id>/ (record, kubeconfigs, node configs, logs).
- `lifecycle`: up, down (also of crashed clusters), scale, drain.
- `programmed`: whether every node's daemon has programmed a change, from its metrics (scale, drain).
- `nodehttp`, `api`: HTTP inside a namespace (metrics, health) and to the API server.
- `command`: the `netkit lab cluster` verbs.
"""
