"""A network-namespace lab: an external client, the node under test, a second node, pods with servers.

Theory of operation, by module:

- `plan`: the address plan the examples use, and the Layout (namespace names, addresses) that
  follows from a random lab id. Pure.
- `wiring`: the Layout as sysctls and `ip -batch` lines per namespace and phase. Pure.
- `build`: runs them (all namespaces of a phase in parallel) and removes namespaces. Never touches the
  machine's own namespace: every object is created inside a namespace the lab just made.
- `nsenter`: setns on helper threads — sockets and sysctls inside a namespace without forking.
- `fork`: a function in a forked child inside a namespace (for Scapy, which caches at import).
- `servers`: one process answering for every pod, on every port, `<pod> <source-it-saw>`.
- `sockets`: real connections, classified answered / refused / unreachable / timeout.
- `probe`: Scapy-crafted probes and sniffers at the backends: the DNATed destination and the source.
- `stats`: chi-square goodness of fit for spread tests.
- `state`: records of running labs under /run/netkit-lab (`netkit lab status`, `down --stale`).
- `pause`: named points where `lab cluster up`/`down` can be held for a test (unset: no effect).
- `lab`: the `Lab` value and `start` / `stop` / `running`.
- `command`: `netkit lab up|down|status`.

```python
from netkit.lab import running
with running() as lab:
    reply = lab.connect("client-a", "10.244.2.11", 8080)
    assert reply.backend == "web-b1" and str(reply.source) == "10.244.1.50"
```
"""

from __future__ import annotations

from netkit.lab.errors import LabError
from netkit.lab.lab import Lab, running, start, stop
from netkit.lab.plan import Client, Node, Pod
from netkit.lab.probe import Probe, Sighting
from netkit.lab.sockets import Outcome, Reply, Stream
from netkit.lab.stats import ChiSquare, assert_spread, chi_square

__all__ = [
    "ChiSquare", "Client", "Lab", "LabError", "Node", "Outcome", "Pod", "Probe", "Reply", "Sighting",
    "Stream", "assert_spread", "chi_square", "running", "start", "stop",
]
