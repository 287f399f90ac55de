"""Cluster DNS: the Kubernetes DNS-Based Service Discovery schema 1.1.0, served from netkit's model.

Theory of operation. A query travels through four pure stages and one IO edge:

    bytes ─► wire.parse_query ─► names.classify ─► resolver.resolve(view) ─► wire.encode ─► bytes
                  (header, question,  (the name's shape:   (records and rcode,    (compression,
                   EDNS, FORMERR)      service, port, …)    no IO)                 truncation, TC)

`view.build(objects, options)` indexes a complete set of Services, EndpointSlices and Pods once per
change; the resolver only looks things up. `engine.Engine` ties the stages together for one view and
keeps the fast path: reply bytes cached per (query bytes without the ID, question name lower-cased),
answered by patching the ID and the question's case — valid because names are compressed
case-insensitively, so every name that repeats the question points back at it. A new view gets a new
cache. `server` (asyncio, UDP and TCP on one address) and `upstream` (forwarding, loop check) are the
only modules that do IO; `command` is the `netkit dns` subcommand.
"""

from netkit.dns.names import Name, name_from_text, name_to_text
from netkit.dns.view import Options, PodMode, View, build

__all__ = ["Name", "Options", "PodMode", "View", "build", "name_from_text", "name_to_text"]
