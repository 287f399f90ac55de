"""Which node addresses accept NodePorts, as kube-proxy decides it (pkg/proxy/util/nodeport_addresses.go).

- nodePortAddresses CIDRs count per family: a family none of them is of accepts NodePorts on every
  local address (kube-proxy adds 0.0.0.0/0 or ::/0 for it), and so does a 0.0.0.0/0 or ::/0 entry.
- `primary` stands for the node's primary IP of each family (the first of its addresses, loopback
  excepted) as a /32 or /128; a family without one accepts everywhere.
- Otherwise the addresses are the node's own that a CIDR contains. The loopback address is always
  one of them (every network namespace has it on `lo`), so `127.0.0.0/8` or `localhost` selects it;
  localhost NodePorts still need iptables.localhostNodePorts, and exist only for IPv4 in iptables mode.
"""

from __future__ import annotations

from ipaddress import IPv4Address, IPv6Address, ip_network

from netkit.config import Config
from netkit.model import IPFamily
from netkit.model.types import IPAddress, IPNetwork

LOOPBACK: dict[IPFamily, IPAddress] = {IPFamily.IPV4: IPv4Address("127.0.0.1"), IPFamily.IPV6: IPv6Address("::1")}


def nodeport_cidrs(config: Config, node_ips: tuple[IPAddress, ...], family: IPFamily) -> tuple[IPNetwork, ...]:
    """The family's nodePortAddresses CIDRs (with `primary` resolved); () means every address."""
    cidrs = [c for c in config.node_port_addresses if IPFamily.of(c) is family]
    if config.primary_node_ports:
        primary = next((ip for ip in node_ips if IPFamily.of(ip) is family and not ip.is_loopback), None)
        if primary is not None:
            cidrs.append(ip_network(primary))
    if any(c.prefixlen == 0 for c in cidrs):
        return ()
    return tuple(dict.fromkeys(cidrs))


def nodeport_ips(config: Config, node_ips: tuple[IPAddress, ...], family: IPFamily) -> tuple[IPAddress, ...] | None:
    """The addresses of this family that accept NodePorts, or None for every local address."""
    cidrs = nodeport_cidrs(config, node_ips, family)
    if not cidrs:
        return None
    mine = [ip for ip in node_ips if IPFamily.of(ip) is family]
    return tuple(ip for ip in dict.fromkeys([*mine, LOOPBACK[family]]) if any(ip in c for c in cidrs))


def localhost_nodeports(config: Config, family: IPFamily) -> bool:
    """NodePorts on 127.0.0.1 (iptables mode): iptables.localhostNodePorts, IPv4 only, and only when
    nodePortAddresses leave loopback in (kube-proxy turns the option off otherwise; `primary` is a
    node IP, never loopback)."""
    if family is not IPFamily.IPV4 or not config.localhost_nodeports:
        return False
    cidrs = [c for c in config.node_port_addresses if IPFamily.of(c) is family]
    if not cidrs:
        return not config.primary_node_ports
    return any(c.network_address.is_loopback or _LOOPBACK_NET in c for c in cidrs)


_LOOPBACK_NET = IPv4Address("127.0.0.0")
