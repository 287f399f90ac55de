"""netlink.py's encoder, byte for byte.

Each golden is the body of the one message `nft -f` (nft 1.0.6, libnftnl 1.2.4) sends for the same
command, taken from its sendmsg with strace, less the NFTA_SET_ELEM_LIST_SET_ID, NFTA_LOOKUP_SET_ID
and NFTA_DYNSET_SET_ID attributes nft adds from its own cache (the kernel finds a set by name first).
The netns test (tests/netns/test_nft_netlink.py) checks what the kernel makes of them.
"""

from __future__ import annotations

import errno
import socket
import struct

import pytest

from netkit.nft import netlink as nl
from netkit.nft.render import address_port_typeof
from netkit.nft.rule import Value
from netkit.nft.ruleset import Chain, Element, Hook, NamedSet, Ruleset
from netkit.nft.transaction import Transaction

SETS = (NamedSet("endpoints-tcp-00", ("integer",), "ipv4_addr . inet_service"),
        NamedSet("service-ips", ("ipv4_addr", "inet_proto", "inet_service"), "verdict"),
        NamedSet("hairpin", ("ipv4_addr", "ipv4_addr")))


def tx(**kw: object) -> Transaction:
    return Transaction("ip", "n", element_sets=SETS, **kw)  # type: ignore[arg-type]


def rule(text: str) -> Transaction:
    return tx(rules=(Chain("svc-a", (text,)),))


TRANSACTIONS = {
    "flush chain ip n svc-a": tx(flush_chains=("svc-a",)),
    "add chain ip n svc-z": tx(add_chains=(Chain("svc-z"),)),
    "add element ip n service-ips { 10.96.0.1 . tcp . 80 : goto svc-a }":
        tx(add_elements=(("service-ips", Element("10.96.0.1 . tcp . 80", "goto svc-a")),)),
    "delete element ip n service-ips { 10.96.0.1 . tcp . 80 }":
        tx(delete_elements=(("service-ips", Element("10.96.0.1 . tcp . 80", "goto svc-a")),)),
    "add element ip n endpoints-tcp-00 { 4097 : 10.0.0.1 . 80 }":
        tx(add_elements=(("endpoints-tcp-00", Element("4097", "10.0.0.1 . 80")),)),
    "add element ip n hairpin { 10.0.0.1 . 10.0.0.1 }": tx(add_elements=(("hairpin", Element("10.0.0.1 . 10.0.0.1")),)),
    "delete chain ip n svc-z": tx(delete_chains=("svc-z",)),
}
RULES = ["ip daddr 10.96.0.1 th dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade",
         "meta l4proto tcp dnat ip to numgen random mod 2 offset 4096 map @endpoints-tcp-00",
         "meta l4proto tcp dnat ip to 10.0.0.1:80", "jump mark-for-masquerade", "goto svc-a",
         "fib saddr type local jump mark-for-masquerade", 'iifname "cni0" goto svc-a', 'iifname != "veth*" goto svc-a',
         "ip saddr @aff update @aff { ip saddr } meta l4proto tcp dnat ip to 10.0.0.1:80",
         "numgen random mod 3 0 update @aff { ip saddr } meta l4proto udp dnat ip to 10.0.0.2:53"]
TRANSACTIONS.update({f"add rule ip n svc-a {r}": rule(r) for r in RULES})

GOLDEN = [
    ('flush chain ip n svc-a',
     "02000000060001006e0000000a0002007376632d61000000"),
    ('add chain ip n svc-z',
     "02000000060001006e0000000a0003007376632d7a000000"),
    ('add element ip n service-ips { 10.96.0.1 . tcp . 80 : goto svc-a }',
     "02000000060001006e00000010000200736572766963652d69707300380003803400018014000180100001000a600001"
     "06000000005000001c0002801800028008000100fffffffc0a0002007376632d61000000"),
    ('delete element ip n service-ips { 10.96.0.1 . tcp . 80 }',
     "02000000060001006e00000010000200736572766963652d697073001c0003801800018014000180100001000a600001"
     "0600000000500000"),
    ('add element ip n endpoints-tcp-00 { 4097 : 10.0.0.1 . 80 }',
     "02000000060001006e00000015000200656e64706f696e74732d7463702d30300000000024000380200001800c000180"
     "0800010001100000100002800c0001000a00000100500000"),
    ('add element ip n hairpin { 10.0.0.1 . 10.0.0.1 }',
     "02000000060001006e0000000c0002006861697270696e001800038014000180100001800c0001000a0000010a000001"),
    ('delete chain ip n svc-z',
     "02000000060001006e0000000a0003007376632d7a000000"),
    ('add rule ip n svc-a ip daddr 10.96.0.1 th dport 80 ip saddr != 10.244.0.0/16 jump mark-for-masquerade',
     "02000000060001006e0000000a0002007376632d610000006c010480340001800c0001007061796c6f61640024000280"
     "08000100000000010800020000000001080003000000001008000400000000042c00018008000100636d700020000280"
     "080001000000000108000200000000000c000380080001000a600001340001800c0001007061796c6f61640024000280"
     "08000100000000010800020000000002080003000000000208000400000000022c00018008000100636d700020000280"
     "080001000000000108000200000000000c0003800600010000500000340001800c0001007061796c6f61640024000280"
     "08000100000000010800020000000001080003000000000c08000400000000022c00018008000100636d700020000280"
     "080001000000000108000200000000010c000380060001000af40000480001800e000100696d6d656469617465000000"
     "340002800800010000000000280002802400028008000100fffffffd180002006d61726b2d666f722d6d617371756572"
     "61646500"),
    ('add rule ip n svc-a meta l4proto tcp dnat ip to numgen random mod 2 offset 4096 map @endpoints-tcp-00',
     "02000000060001006e0000000a0002007376632d61000000f400048024000180090001006d6574610000000014000280"
     "080002000000001008000100000000012c00018008000100636d70002000028008000100000000010800020000000000"
     "0c0003800500010006000000340001800b0001006e756d67656e00002400028008000100000000010800020000000002"
     "080003000000000108000400000010003c0001800b0001006c6f6f6b757000002c000280080002000000000108000300"
     "0000000115000100656e64706f696e74732d7463702d30300000000030000180080001006e6174002400028008000100"
     "00000001080002000000000208000300000000010800050000000009"),
    ('add rule ip n svc-a meta l4proto tcp dnat ip to 10.0.0.1:80',
     "02000000060001006e0000000a0002007376632d61000000e400048024000180090001006d6574610000000014000280"
     "080002000000001008000100000000012c00018008000100636d70002000028008000100000000010800020000000000"
     "0c00038005000100060000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280"
     "080001000a0000012c0001800e000100696d6d6564696174650000001800028008000100000000020c00028006000100"
     "0050000038000180080001006e6174002c00028008000100000000010800020000000002080003000000000108000500"
     "000000020800070000000002"),
    ('add rule ip n svc-a jump mark-for-masquerade',
     "02000000060001006e0000000a0002007376632d610000004c000480480001800e000100696d6d656469617465000000"
     "340002800800010000000000280002802400028008000100fffffffd180002006d61726b2d666f722d6d617371756572"
     "61646500"),
    ('add rule ip n svc-a goto svc-a',
     "02000000060001006e0000000a0002007376632d61000000400004803c0001800e000100696d6d656469617465000000"
     "2800028008000100000000001c0002801800028008000100fffffffc0a0002007376632d61000000"),
    ('add rule ip n svc-a fib saddr type local jump mark-for-masquerade',
     "02000000060001006e0000000a0002007376632d61000000a00004802800018008000100666962001c00028008000300"
     "00000001080002000000000308000100000000012c00018008000100636d700020000280080001000000000108000200"
     "000000000c0003800800010002000000480001800e000100696d6d656469617465000000340002800800010000000000"
     "280002802400028008000100fffffffd180002006d61726b2d666f722d6d61737175657261646500"),
    ('add rule ip n svc-a iifname "cni0" goto svc-a',
     "02000000060001006e0000000a0002007376632d610000009c00048024000180090001006d6574610000000014000280"
     "080002000000000608000100000000013800018008000100636d70002c00028008000100000000010800020000000000"
     "1800038014000100636e69300000000000000000000000003c0001800e000100696d6d65646961746500000028000280"
     "08000100000000001c0002801800028008000100fffffffc0a0002007376632d61000000"),
    ('add rule ip n svc-a iifname != "veth*" goto svc-a',
     "02000000060001006e0000000a0002007376632d610000009000048024000180090001006d6574610000000014000280"
     "080002000000000608000100000000012c00018008000100636d70002000028008000100000000010800020000000001"
     "0c00038008000100766574683c0001800e000100696d6d6564696174650000002800028008000100000000001c000280"
     "1800028008000100fffffffc0a0002007376632d61000000"),
    ('add rule ip n svc-a ip saddr @aff update @aff { ip saddr } meta l4proto tcp dnat ip to 10.0.0.1:80',
     "02000000060001006e0000000a0002007376632d610000009c010480340001800c0001007061796c6f61640024000280"
     "08000100000000010800020000000001080003000000000c0800040000000004240001800b0001006c6f6f6b75700000"
     "1400028008000200000000010800010061666600340001800c0001007061796c6f616400240002800800010000000001"
     "0800020000000001080003000000000c08000400000000042c0001800b00010064796e73657400001c00028008000400"
     "000000010800030000000001080001006166660024000180090001006d65746100000000140002800800020000000010"
     "08000100000000012c00018008000100636d700020000280080001000000000108000200000000000c00038005000100"
     "060000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280080001000a000001"
     "2c0001800e000100696d6d6564696174650000001800028008000100000000020c000280060001000050000038000180"
     "080001006e6174002c000280080001000000000108000200000000020800030000000001080005000000000208000700"
     "00000002"),
    ('add rule ip n svc-a numgen random mod 3 0 update @aff { ip saddr } meta l4proto udp dnat ip to 10.0.0.2:53',
     "02000000060001006e0000000a0002007376632d61000000a4010480340001800b0001006e756d67656e000024000280"
     "08000100000000010800020000000003080003000000000108000400000000002c00018008000100636d700020000280"
     "080001000000000108000200000000000c0003800800010000000000340001800c0001007061796c6f61640024000280"
     "08000100000000010800020000000001080003000000000c08000400000000042c0001800b00010064796e7365740000"
     "1c00028008000400000000010800030000000001080001006166660024000180090001006d6574610000000014000280"
     "080002000000001008000100000000012c00018008000100636d70002000028008000100000000010800020000000000"
     "0c00038005000100110000002c0001800e000100696d6d6564696174650000001800028008000100000000010c000280"
     "080001000a0000022c0001800e000100696d6d6564696174650000001800028008000100000000020c00028006000100"
     "0035000038000180080001006e6174002c00028008000100000000010800020000000002080003000000000108000500"
     "000000020800070000000002"),
]


def messages(data: bytes) -> list[tuple[int, int, int, bytes]]:
    """(type, flags, sequence, body) of each netlink message in a batch."""
    out, offset = [], 0
    while offset < len(data):
        length, kind, flags, seq, _ = struct.unpack_from("=IHHII", data, offset)
        out.append((kind, flags, seq, data[offset + 16:offset + length]))
        offset += (length + 3) & ~3
    return out


KINDS = {"flush": 8, "add chain": 3, "add element": 12, "delete element": 14, "delete chain": 5, "add rule": 6}


@pytest.mark.parametrize(("command", "golden"), GOLDEN, ids=[c for c, _ in GOLDEN])
def test_each_message_is_the_one_nft_sends(command: str, golden: str) -> None:
    batch = nl.encode(TRANSACTIONS[command], genid=7)
    begin, message, end = messages(batch.data)
    assert message[3].hex() == golden
    kind = next(k for prefix, k in KINDS.items() if command.startswith(prefix))
    assert message[0] == nl.NFNL_SUBSYS_NFTABLES << 8 | kind
    assert message[1] & (nl.NLM_F_REQUEST | nl.NLM_F_ACK) == nl.NLM_F_REQUEST | nl.NLM_F_ACK
    assert message[1] & nl.NLM_F_CREATE == (nl.NLM_F_CREATE if command.startswith("add") else 0)
    assert message[1] & nl.NLM_F_APPEND == (nl.NLM_F_APPEND if command.startswith("add rule") else 0)


def test_a_batch_is_begin_with_the_generation_then_messages_then_end() -> None:
    batch = nl.encode(tx(flush_chains=("svc-a", "svc-b"), delete_chains=("svc-b",)), genid=0x01020304, seq=40)
    got = messages(batch.data)
    assert [(k, s) for k, _, s, _ in got] == [(0x10, 40), (0xA08, 41), (0xA08, 42), (0xA05, 43), (0x11, 44)]
    # BATCH_BEGIN: nfgenmsg (AF_UNSPEC, v0, res_id NFNL_SUBSYS_NFTABLES big-endian), NFNL_BATCH_GENID
    assert got[0][3] == bytes([0, 0, 0, 10]) + struct.pack("=HH", 8, 1) + bytes([1, 2, 3, 4])
    assert got[-1][3] == bytes([0, 0, 0, 10])
    assert batch.messages == 3 and batch.what[43] == "delete chain svc-b"


def test_ip6_keys_values_and_prefixes() -> None:
    sets = (NamedSet("endpoints-udp-01", ("integer",), "ipv6_addr . inet_service"),
            NamedSet("health-check-nodeports", ("inet_service",)))
    t = Transaction("ip6", "netkit", element_sets=sets,
                    add_elements=(("endpoints-udp-01", Element("3", "fd00::1 . 53")),
                                  ("health-check-nodeports", Element("31000"))))
    bodies = [m[3] for m in messages(nl.encode(t, 1).data)[1:-1]]
    assert bodies[0][0] == socket.AF_INET6
    assert struct.pack("=I", 3) in bodies[0]
    assert bytes.fromhex("fd000000000000000000000000000001" "00350000") in bodies[0]  # port padded to 4
    assert bytes.fromhex("0600010079180000") in bodies[1]  # 31000 alone: 2 bytes, big-endian
    r = nl.rule_expressions("ip6 saddr != fd00:244::/48 jump mark-for-masquerade", "ip6")
    assert struct.pack("=HH", 8, 3) + struct.pack(">I", 8) in r and struct.pack(">I", 6) in r  # +8, 6 bytes
    assert bytes.fromhex("fd0002440000") in r


def test_many_elements_are_split_across_messages() -> None:
    many = tuple(("hairpin", Element(f"10.0.{i // 250}.{i % 250} . 10.0.{i // 250}.{i % 250}")) for i in range(600))
    got = messages(nl.encode(tx(add_elements=many), 1).data)
    assert len(got) == 2 + 3  # 256 + 256 + 88


UNSUPPORTED = {
    "a whole table": Transaction("ip", create=Ruleset.of("ip", [], [])),
    "a new set": tx(add_sets=(NamedSet("x", ("ipv4_addr",)),)),
    "an anonymous set up to the last address": rule("ip saddr != { 1.2.3.0/24, 255.0.0.0/8 } drop"),
    "an anonymous set of destinations": rule("ip daddr != { 1.2.3.0/24, 5.6.7.0/24 } drop"),
    "a prefix not on a byte boundary": rule("ip saddr 10.240.0.0/12 goto svc-a"),
    "a base chain": tx(add_chains=(Chain("c", (), Hook("nat", "prerouting", -100)),)),
    "masquerade": rule("masquerade fully-random"),
    "a vmap": rule("ip daddr . meta l4proto . th dport vmap @service-ips"),
    "an interval set's elements": Transaction("ip", "n", add_elements=(("ips", Element("10.0.0.0/8")),),
                                              element_sets=(NamedSet("ips", ("ipv4_addr",), flags=("interval",)),)),
    "a set of unknown type": Transaction("ip", "n", add_elements=(("nope", Element("1")),)),
    "a value of the wrong type": tx(add_elements=(("hairpin", Element("10.0.0.1")),)),
}


@pytest.mark.parametrize("what", sorted(UNSUPPORTED))
def test_what_is_not_encoded_is_said(what: str) -> None:
    with pytest.raises(nl.Unsupported):
        nl.encode(UNSUPPORTED[what], 1)


def test_a_batch_too_big_for_one_send_is_not_encoded() -> None:
    many = tuple(("hairpin", Element(f"10.{i >> 16}.{(i >> 8) & 255}.{i & 255} . 10.0.0.1")) for i in range(6000))
    with pytest.raises(nl.Unsupported, match="bytes"):
        nl.encode(tx(add_elements=many), 1)


ANONYMOUS = [  # nft's three messages for one rule with an anonymous interval set (set id 1)
    "02000000060001006e0000000c0002005f5f73657425640008000300000000070800040000000007080005000000000408000a0000"
    "0000010c000980080001000000000526000d000004020000000204010000000314000407000000010c00040c00000001040b00000000"
    "00",
    "02000000060001006e0000000c0002005f5f73657425640008000400000000016c0003801800018008000300000000010c00018008"
    "00010000000000100002800c00018008000100010203001800038008000300000000010c0001800800010001020400100004800c00"
    "018008000100050607081800058008000300000000010c0001800800010005060709",
    "02000000060001006e0000000a0002007376632d61000000a0000480340001800c0001007061796c6f61640024000280080001000000"
    "00010800020000000001080003000000000c0800040000000004380001800b0001006c6f6f6b757000002800028008000200000000010c"
    "0001005f5f73657425640008000400000000010800050000000001300001800e000100696d6d6564696174650000001c000280080001"
    "0000000000100002800c0002800800010000000000",
]


def test_an_anonymous_interval_set_is_created_before_its_rule_as_nft_does() -> None:
    got = messages(nl.encode(rule("ip saddr != { 1.2.3.0/24, 5.6.7.8 } drop"), 1).data)[1:-1]
    assert [k & 0xFF for k, _, _, _ in got] == [9, 12, 6]  # NEWSET, NEWSETELEM, NEWRULE
    assert [body.hex() for _, _, _, body in got] == ANONYMOUS


def test_touching_ranges_are_merged_and_a_range_from_zero_has_no_leading_end() -> None:
    ranges = nl.intervals([Value("0.0.0.0/8"), Value("1.0.0.0/8"), Value("5.6.7.8")], 32)
    assert ranges == [(0, 0x01FFFFFF), (0x05060708, 0x05060708)]
    assert len(nl.interval_elements(ranges, 32)) == 4  # start, end, start, end


ENDPOINT_MAP = [  # nft's `add map … { typeof numgen random mod 1 : ip daddr . tcp dport; }` and its element
    "02000000060001006e00000015000200656e64706f696e74732d7463702d30370000000008000300000000080800040000000004"
    "080005000000000408000600000001cd080007000000000808000a000000000168000d00000401000000010400000000031a0004"
    "170000000112000401000000010401000000020400000000043400040d000000012c0014000407000000010c00040c0000000104"
    "0c0000000114000407000000010c000408000000010402000000060400000000",
    "02000000060001006e00000015000200656e64706f696e74732d7463702d30370000000008000400000000012400038020000180"
    "0c0001800800010000100000100002800c0001000a00000100500000",
]


def test_a_new_endpoint_map_is_created_with_nfts_typeof_userdata() -> None:
    m = NamedSet("endpoints-tcp-07", ("integer",), "ipv4_addr . inet_service",
                 elements=frozenset({Element("4096", "10.0.0.1 . 80")}),
                 typeof=address_port_typeof("ipv4_addr . inet_service", "tcp"))
    got = messages(nl.encode(Transaction("ip", "n", add_sets=(m,)), 1).data)[1:-1]
    assert [k & 0xFF for k, _, _, _ in got] == [9, 12]  # NEWSET, then its elements (after any rules)
    assert [body.hex() for _, _, _, body in got] == ENDPOINT_MAP
    v6 = NamedSet("endpoints-udp-01", ("integer",), "ipv6_addr . inet_service",
                  typeof=address_port_typeof("ipv6_addr . inet_service", "udp"))
    body = messages(nl.encode(Transaction("ip6", "n", add_sets=(v6,)), 1).data)[1][3]
    assert struct.pack(">I", 8 << 6 | 13) in body and bytes.fromhex("010c000406000000") in body  # udp


def _error(seq: int, code: int) -> bytes:
    return struct.pack("=IHHII", 36, nl.NLMSG_ERROR, 0x100, seq, 0) + struct.pack("=i", -code) + bytes(16)


def test_replies_name_what_failed() -> None:
    batch = nl.encode(tx(flush_chains=("svc-a",), delete_chains=("svc-z",)), 1, seq=10)
    acked, failures = nl.errors(_error(11, 0) + _error(12, errno.ENOENT), batch)
    assert acked == {11, 12}
    assert failures == ["delete chain svc-z: No such file or directory (ENOENT)"]
    _, moved = nl.errors(_error(10, errno.ERESTART), batch)
    assert moved and "generation moved" in moved[0]


def test_a_socket_that_cannot_be_opened_sends_nothing_and_says_so() -> None:
    """Unsupported, not an error: nothing reached the kernel, so the script may go instead."""
    def unavailable() -> socket.socket:
        raise PermissionError(1, "Operation not permitted")

    with pytest.raises(nl.Unsupported, match="netlink socket"):
        nl.Writer(unavailable).send(tx(flush_chains=("svc-a",)), 1)

