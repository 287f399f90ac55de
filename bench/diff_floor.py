"""The least a Python process does to tell whether an iptables nat table is what a dump of Services
and EndpointSlices asks for: the floor under `netkit diff` in iptables mode, measured by
bench/diff.py in the same run as the kernel's own dump.

Like `netkit diff`, it starts the dump of the three tables in the namespace as netkit does
(legacy: `iptables-legacy-save -t` of each at once; nft: one `iptables-nft-save`) and reads it in
a thread (through widened pipes) while it works. It reads the
JSON list (`kubectl get -o json`), checks nothing but each endpoint's address, and builds the nat
table's text in kube-proxy's layout as iptables-legacy-save prints it: per service port a
KUBE-SERVICES rule, a KUBE-SVC chain (masquerade rule and one rule per endpoint, with its
probability), one KUBE-SEP chain of two rules per endpoint, named by the SHA-256 hash kube-proxy
uses; chain declarations sorted by name, then the rules, as one string. Nothing else: no validation
of the other fields, no node-local state (traffic policies, topology, terminating endpoints), no
session affinity, NodePort, external or load-balancer rules, no plan and no report — so its text is
a little smaller than the real table, and its time less than any complete implementation's. Then it
compares its text with the nat table's (they differ where the floor leaves things out) and prints
what it built and whether the two were equal.

    .venv/bin/python bench/diff_floor.py DUMP.json NETNS legacy
"""

from __future__ import annotations

import base64
import fcntl
import gc
import hashlib
import json
import os
import subprocess
import sys
import threading


def chain(prefix: str, key: str) -> str:
    return prefix + base64.b32encode(hashlib.sha256(key.encode()).digest()).decode()[:16]


def text(doc: dict[str, object]) -> tuple[str, int]:
    octets = {str(i) for i in range(256)}
    services: list[tuple[str, str, dict[str, object]]] = []
    slices: dict[tuple[str, str], list[dict[str, object]]] = {}
    for item in doc["items"]:  # type: ignore[attr-defined]
        meta = item["metadata"]
        if item["kind"] == "Service":
            services.append((meta["namespace"], meta["name"], item["spec"]))
        elif item["kind"] == "EndpointSlice":
            key = (meta["namespace"], meta["labels"]["kubernetes.io/service-name"])
            slices.setdefault(key, []).append(item)
    chains: dict[str, list[str]] = {"KUBE-SERVICES": []}
    entry = chains["KUBE-SERVICES"]
    for ns, name, spec in services:
        for sp in spec["ports"]:  # type: ignore[attr-defined]
            spn, proto = f"{ns}/{name}:{sp['name']}", sp.get("protocol", "TCP").lower()
            endpoints = []
            for s in slices.get((ns, name), ()):
                port = next(p["port"] for p in s["ports"] if p["name"] == sp["name"])
                for e in s["endpoints"]:  # type: ignore[attr-defined]
                    address = e["addresses"][0]
                    parts = address.split(".")
                    if len(parts) != 4 or not all(p in octets for p in parts):
                        raise SystemExit(f"{spn}: {address!r} is not an IPv4 address")
                    if (e.get("conditions") or {}).get("ready") is not False:
                        endpoints.append(f"{address}:{port}")
            endpoints.sort()
            svc = chain("KUBE-SVC-", spn + proto)
            ip, dport = spec["clusterIP"], sp["port"]  # type: ignore[index]
            entry.append(f'-d {ip}/32 -p {proto} -m comment --comment "{spn} cluster IP" -m {proto} '
                         f"--dport {dport} -j {svc}")
            rules = chains[svc] = [f'! -s 10.128.0.0/9 -d {ip}/32 -p {proto} -m comment --comment "{spn} cluster IP"'
                                   f" -m {proto} --dport {dport} -j KUBE-MARK-MASQ"]
            n = len(endpoints)
            for i, ep in enumerate(endpoints):
                sep = chain("KUBE-SEP-", spn + proto + ep)
                odds = f"-m statistic --mode random --probability {1 / (n - i):.11f} " if i < n - 1 else ""
                rules.append(f"{odds}-j {sep}")
                chains[sep] = [f"-s {ep.rsplit(':', 1)[0]}/32 -j KUBE-MARK-MASQ",
                               f"-p {proto} -m {proto} -j DNAT --to-destination {ep}"]
    order = sorted(chains)
    out = ["*nat\n", ":PREROUTING ACCEPT [0:0]\n", ":INPUT ACCEPT [0:0]\n", ":OUTPUT ACCEPT [0:0]\n",
           ":POSTROUTING ACCEPT [0:0]\n"]
    out.extend(f":{c} - [0:0]\n" for c in order)
    for c in order:
        prefix = f"-A {c} "
        for rule in chains[c]:
            out += (prefix, rule, "\n")
    out.append("COMMIT\n")
    return "".join(out), len(chains)


def dumps(netns: str, backend: str) -> dict[str, bytes]:
    """The tables' iptables-save output, as netkit reads them (rules/iptables/kernel.py): legacy's
    three tools started at once, iptables-nft's one run of every table; the pipes widened to 1 MiB
    and read in turn with os.read."""
    tables = ("mangle", "filter", "nat") if backend == "legacy" else ("",)  # nft: one run prints them all
    procs = {t: subprocess.Popen(["ip", "netns", "exec", netns, f"iptables-{backend}-save", *(("-t", t) if t else ())],
                                 stdout=subprocess.PIPE) for t in tables}
    out: dict[str, bytes] = {}
    for table, proc in procs.items():
        assert proc.stdout is not None
        fd = proc.stdout.fileno()
        fcntl.fcntl(fd, fcntl.F_SETPIPE_SZ, 1 << 20)
        chunks = []
        while chunk := os.read(fd, 1 << 20):
            chunks.append(chunk)
        out[table] = b"".join(chunks)
        if proc.wait() != 0:
            raise SystemExit(f"iptables-{backend}-save -t {table} failed")
    return out


def main() -> int:
    gc.disable()  # as netkit's one-pass commands
    path, netns, backend = sys.argv[1:4]
    read: dict[str, dict[str, bytes]] = {}
    reader = threading.Thread(target=lambda: read.__setitem__("tables", dumps(netns, backend)))
    reader.start()
    with open(path, "rb") as f:
        doc = json.loads(f.read())
    table, n = text(doc)
    reader.join()
    live = b"".join(read["tables"].values()).decode()
    start = live.find("*nat\n")  # after iptables-save's comment line; -1: no nat table
    body = live[start:live.index("COMMIT\n", start) + 7] if start >= 0 else ""
    same = body == table
    print(f"{n} chains, {len(table) / 1e6:.1f} MB built; nat table {len(body) / 1e6:.1f} MB, "
          f"{'equal' if same else 'different'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
