"""The nfnetlink ipset list codec (netkit.rules.ipvs.ipset), on messages laid out as the kernel's
ip_set_dump_do lays them out; the real kernel answers in tests/netns/test_ipvs_ipset_read.py."""

from __future__ import annotations

import socket
import struct
from ipaddress import ip_address

from netkit.rules.ipvs import ipset as ips
from netkit.rules.ipvs.netlink import NLA_F_NESTED, NLM_F_DUMP, NLM_F_REQUEST, attrs, messages, nla

NET_ORDER = 0x4000  # NLA_F_NET_BYTEORDER


def ip_attr(kind: int, text: str) -> bytes:
    a = ip_address(text)
    inner = nla((ips.IPADDR_IPV4 if a.version == 4 else ips.IPADDR_IPV6) | NET_ORDER, a.packed)
    return nla(kind | NLA_F_NESTED, inner)


def data(*parts: bytes) -> bytes:
    return nla(ips.ATTR_DATA | NLA_F_NESTED, b"".join(parts))


def port(p: int, proto: int | None = 6) -> bytes:
    out = nla(ips.A_PORT | NET_ORDER, struct.pack("!H", p))
    return out + (nla(ips.A_PROTO, bytes([proto])) if proto is not None else b"")


def message(name: str, entries: list[bytes], header: tuple[str, int] | None = None) -> bytes:
    body = nla(ips.ATTR_PROTOCOL, b"\x06") + nla(ips.ATTR_SETNAME, name.encode() + b"\0")
    if header:
        body += nla(ips.ATTR_TYPENAME, header[0].encode() + b"\0") + nla(ips.ATTR_FAMILY, bytes([header[1]]))
        body += nla(ips.ATTR_REVISION, b"\x01") + nla(ips.ATTR_DATA | NLA_F_NESTED, b"")
    return struct.pack("=BBH", socket.AF_INET, 0, 0) + body + nla(ips.ATTR_ADT | NLA_F_NESTED, b"".join(entries))


def test_entries_of_every_shape_decode_to_ipset_saves_spelling() -> None:
    loop = message("KUBE-LOOP-BACK", [data(ip_attr(ips.A_IP, "10.244.1.5"), port(8080),
                                           ip_attr(ips.A_IP2, "10.244.1.5"))], ("hash:ip,port,ip", ips.NFPROTO_IPV4))
    more = message("KUBE-LOOP-BACK", [data(ip_attr(ips.A_IP, "10.244.1.6"), port(53, 17),
                                           ip_attr(ips.A_IP2, "10.244.1.6"))])  # a set continued
    cidr = message("KUBE-6-LOAD-BALANCER-SRC-CIDR", [
        data(ip_attr(ips.A_IP, "fd00::10"), port(80), ip_attr(ips.A_IP2, "2001:db8::"), nla(ips.A_CIDR2, b"\x20")),
        data(ip_attr(ips.A_IP, "fd00::10"), port(80), ip_attr(ips.A_IP2, "2001:db8::9"), nla(ips.A_CIDR2, b"\x80")),
        data(ip_attr(ips.A_IP, "fd00::10"), port(81, 132), ip_attr(ips.A_IP2, "2001:db8::"), nla(ips.A_CIDR2, b"\x30"),
             nla(ips.A_CADT_FLAGS | NET_ORDER, struct.pack("!I", ips.FLAG_NOMATCH)))],
        ("hash:ip,port,net", ips.NFPROTO_IPV6))
    nets = message("NETS", [data(ip_attr(ips.A_IP, "10.0.0.0"), nla(ips.A_CIDR, b"\x08")),
                            data(ip_attr(ips.A_IP, "10.0.0.1"), nla(ips.A_CIDR, b"\x20"))],
                   ("hash:net", ips.NFPROTO_IPV4))
    ports = message("KUBE-NODE-PORT-TCP", [data(port(30080, None)), data(port(0, None))], ("bitmap:port", 0))
    odd = message("ODD", [data(ip_attr(ips.A_IP, "10.96.0.1"), port(5, 99))], ("hash:ip,port", ips.NFPROTO_IPV4))
    got = {d.name: (d.type, d.family, d.entries) for d in ips.decode([loop, more, cidr, nets, ports, odd])}
    assert got == {
        "KUBE-LOOP-BACK": ("hash:ip,port,ip", 2, {"10.244.1.5,tcp:8080,10.244.1.5", "10.244.1.6,udp:53,10.244.1.6"}),
        "KUBE-6-LOAD-BALANCER-SRC-CIDR": ("hash:ip,port,net", 10, {
            "fd00::10,tcp:80,2001:db8::/32", "fd00::10,tcp:80,2001:db8::9", "fd00::10,sctp:81,2001:db8::/48 nomatch"}),
        "NETS": ("hash:net", 2, {"10.0.0.0/8", "10.0.0.1"}),
        "KUBE-NODE-PORT-TCP": ("bitmap:port", 0, {"30080", "0"}),
        "ODD": ("hash:ip,port", 2, {"10.96.0.1,99:5"}),
    }


def test_a_list_request_names_one_set_at_the_minimum_protocol() -> None:
    ((kind, flags, seq, payload),) = list(messages(ips.list_request(7, "KUBE-CLUSTER-IP")))
    assert (kind, flags, seq) == (ips.NFNL_SUBSYS_IPSET << 8 | ips.CMD_LIST, NLM_F_REQUEST | NLM_F_DUMP, 7)
    a = attrs(payload[4:])
    assert a[ips.ATTR_PROTOCOL] == b"\x06" and a[ips.ATTR_SETNAME] == b"KUBE-CLUSTER-IP\0"
