"""Named points where a lab command can be held, so a test can act in "the middle of a build".

A test that must interrupt `netkit lab cluster up` while it builds cannot race a wall clock: on a busy
machine the build may finish first, on an idle one the signal may come too early. Instead it sets

    NETKIT_LAB_PAUSE_DIR=DIR   NETKIT_LAB_PAUSE_AT=POINT[,POINT...]

and the command, on reaching a named POINT, writes `DIR/POINT.reached` (its pid) and waits until
`DIR/POINT.go` exists (at most `MAX_WAIT` seconds, then it carries on). The test waits for the
`.reached` file (an event, with a generous bound), sends its signal while the command is held there,
and Ctrl-C or SIGTERM interrupts the wait as it would the build. Unset (always, outside tests), a
point costs one dictionary look-up. The points:

- `cluster-namespaces`: `lab cluster up` has recorded the cluster and created its namespaces; nothing
  is wired and no process is started.
- `cluster-control-plane`: `lab cluster up`'s control plane is ready (the kubeconfig is written, every
  node's daemon has synced); `up` has not returned.
- `cluster-down`: `lab cluster down` (also the one `up` runs after an interruption) has stopped the
  processes and is about to delete the namespaces and the record.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

DIR_ENV = "NETKIT_LAB_PAUSE_DIR"
AT_ENV = "NETKIT_LAB_PAUSE_AT"
POINTS = ("cluster-namespaces", "cluster-control-plane", "cluster-down")
MAX_WAIT = 120.0


def point(name: str) -> None:
    """Hold here when the environment names this point (see above); return at once otherwise."""
    assert name in POINTS, name
    where = os.environ.get(DIR_ENV)
    if not where or name not in os.environ.get(AT_ENV, "").split(","):
        return
    held = Path(where)
    reached = held / f"{name}.reached"
    tmp = reached.with_suffix(".tmp")
    tmp.write_text(f"{os.getpid()}\n")
    tmp.replace(reached)
    deadline = time.monotonic() + MAX_WAIT
    while not (held / f"{name}.go").exists() and time.monotonic() < deadline:
        time.sleep(0.02)
