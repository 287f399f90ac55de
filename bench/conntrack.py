"""Benchmark: deleting stale UDP conntrack entries — netkit's batched reconcile vs one pyroute2
request per entry (what the daemon did before), in the same run.

In a fresh network namespace (created here and always removed), N UDP entries are made as DNATed
flows look (original to a service IP, reply from one of two endpoints); half point at an endpoint
that is gone. Baseline: pyroute2's synchronous `Conntrack().dump_entries` + `delete(entry)` per stale
entry. netkit: `ConntrackCleaner.reconcile` — one UDP dump filtered in the kernel, then the stale
entries deleted in batches over one netlink socket. Entries are inserted with the conntrack tool
(~2 ms each, not timed).

    .venv/bin/python bench/conntrack.py [--entries 4900]
"""

from __future__ import annotations

import argparse
import socket
import subprocess
import sys
import time
import uuid
from ipaddress import ip_address
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import results  # noqa: E402  (bench/results.py: --json)

from netkit.model.conntrack import Frontends  # noqa: E402
from netkit.netns import in_netns  # noqa: E402
from netkit.runtime.conntrack import ConntrackCleaner  # noqa: E402

SERVICE, GONE, KEPT = "10.96.0.53", "10.244.1.11", "10.244.2.11"


def insert(netns: str, count: int) -> None:
    script = "".join(
        f"conntrack -I -p udp -s 203.0.113.5 -d {SERVICE} --sport {10000 + i} --dport 53 "
        f"-r {GONE if i % 2 else KEPT} -q 203.0.113.5 --reply-port-src 5353 --reply-port-dst {10000 + i} "
        "-t 300 2>/dev/null\n" for i in range(count))
    subprocess.run(["ip", "netns", "exec", netns, "sh", "-s"], input=script, text=True, check=True)


def per_entry(netns: str) -> int:
    def work() -> int:
        from pyroute2 import Conntrack
        from pyroute2.netlink.nfnetlink.nfctsocket import NFCTAttrTuple

        ct = Conntrack()
        try:
            stale = [e for e in ct.dump_entries(tuple_orig=NFCTAttrTuple(proto=socket.IPPROTO_UDP, dport=53))
                     if e.tuple_reply.saddr == GONE]
            for entry in stale:
                ct.delete(entry)
            return len(stale)
        finally:
            ct.close()
    return in_netns(netns, work)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--entries", type=int, default=4900, help="UDP entries, half of them stale")
    args = results.parse_args(ap)
    netns = f"nkb-ct-{uuid.uuid4().hex[:8]}"
    subprocess.run(["ip", "netns", "add", netns], check=True)
    try:
        checked = Frontends({(ip_address(SERVICE), 53): frozenset({(ip_address(KEPT), 5353)})})
        insert(netns, args.entries)
        t0 = time.perf_counter()
        base = per_entry(netns)
        baseline = time.perf_counter() - t0
        subprocess.run(["ip", "netns", "exec", netns, "conntrack", "-F"], capture_output=True, check=True)
        insert(netns, args.entries)
        result = ConntrackCleaner(netns).reconcile(checked)
        print(f"{args.entries} UDP entries, {base} stale")
        print(f"baseline, one pyroute2 request per entry: {baseline:.3f} s ({baseline / max(base, 1) * 1e3:.2f} ms "
              "per deleted entry)")
        print(f"netkit reconcile (dump + batched deletes): {result.seconds:.3f} s "
              f"({result.seconds / max(result.deleted, 1) * 1e3:.3f} ms per deleted entry, {result.flows} read, "
              f"{result.deleted} deleted)")
        print(f"ratio netkit / baseline: {result.seconds / baseline:.3f}")
        results.write(args.json, __file__, f"deleting {base:,} stale UDP conntrack entries of {args.entries:,}: "
                      "netkit's reconcile (one dump, batched deletes over one socket) vs one pyroute2 request per "
                      "entry", [results.Figure.measured("reconcile", result.seconds, "s", baseline)])
    finally:
        subprocess.run(["ip", "netns", "del", netns], check=False)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
