"""CoreDNS's `autopath @kubernetes`: the client's search path walked server-side (pure).

A pod's resolv.conf (ndots:5) makes it ask `NAME.<ns>.svc.<zone>`, `NAME.svc.<zone>`, `NAME.<zone>`,
its node's search domains, then `NAME.` — one round trip each, most of them NXDOMAIN. With autopath,
the first of those queries is enough: the server finds the client's pod by its source address (so
it needs `pods verified`, as CoreDNS does: no pod, no autopath), and when the name asked is in the
first element of that pod's search path it tries `NAME` with every element in turn until one is not
NXDOMAIN. That answer goes back under the name asked, with a CNAME from it to the name found in
front (CoreDNS's cnamer); when all are NXDOMAIN the client gets the first one's NXDOMAIN and walks
the path itself. The search path is CoreDNS's: `<ns>.svc.<zone>`, `svc.<zone>`, `<zone>`, then the
search domains of the server's resolv.conf, then the root (the bare name, forwarded).
"""

from __future__ import annotations

from ipaddress import ip_address

from netkit.dns.names import Name
from netkit.dns.view import Options, View


def search_path(view: View, options: Options, client: str) -> tuple[Name, ...]:
    """The search path of the pod at `client` (an IP address as text); empty when it is not a pod."""
    if not options.autopath:
        return ()
    try:
        namespace = view.pod_namespaces.get(ip_address(client.split("%")[0]))
    except ValueError:
        return ()
    if namespace is None:
        return ()
    zone = options.zone
    return ((namespace, "svc", *zone), ("svc", *zone), zone, *options.autopath_search, ())


def candidates(name: Name, search: tuple[Name, ...]) -> tuple[Name, ...]:
    """The names to try for `name` (lower-case labels), in order; empty when `name` is not in the
    first element of the search path (then the query is answered as it is)."""
    if not search:
        return ()
    first = search[0]
    if len(name) <= len(first) or name[len(name) - len(first):] != first:
        return ()
    base = name[:len(name) - len(first)]
    return tuple(base + s for s in search)
