"""The wire format: queries in, replies out, pure.

`parse_query(data)` reads a query strictly (RFC 1035, RFC 6891): one question, no answer or authority
records, at most one OPT record at the root, no bytes left over. It returns a `Query`, a `Rejected`
(FORMERR, NOTIMP or BADVERS, answered with whatever of the header and question could be read), or None
when nothing should be sent back (shorter than a header, or a response rather than a query — answering
those would let two servers ping-pong).

`encode(query, reply, limit)` writes a reply with dnslib's record packers into a buffer that compresses
names case-insensitively where CoreDNS echoes the query's case: the owners of the question's records
and of the authority, and the zone part of every name (other names keep the view's canonical case, see
_Buffer). The question is written first, as received, so each echoed name is a pointer into it, and a
cached reply serves any casing of the same name once its question bytes are patched. A reply larger
than `limit` is cut at the last whole record that fits; TC is set when answer or authority records
were dropped (additional records may be dropped silently, RFC 2181 §9). The OPT record is kept after
any cut.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence
from dataclasses import dataclass

from dnslib import AAAA, CNAME, PTR, RR, SOA, SRV, TXT, A, DNSBuffer, DNSLabel

from netkit.dns.names import Name, lower_label
from netkit.dns.resolver import Rcode, Record, Reply, RType, Soa, Srv, Txt

HEADER = struct.Struct("!HHHHHH")
OPT_SIZE = 11
ADVERTISED_UDP_SIZE = 1232  # DNS flag day 2020: no IP fragmentation on common paths
UDP_BUCKETS = (512, 1232, 4096)  # client buffer sizes are rounded down to one of these
TCP_LIMIT = 65535
MAX_NAME = 255

QR, AA, TC, RD, RA = 0x8000, 0x0400, 0x0200, 0x0100, 0x0080
OPCODE_MASK = 0x7800


@dataclass(frozen=True, slots=True)
class Edns:
    udp_size: int
    version: int
    do: bool = False  # DNSSEC OK


@dataclass(frozen=True, slots=True)
class Query:
    id: int
    flags: int
    raw_name: bytes  # the question name as received (its case), ending with the root byte
    name: Name
    qtype: int
    qclass: int
    edns: Edns | None
    plain: bool  # header, question and an option-less OPT only: its bytes identify its reply

    @property
    def question(self) -> bytes:
        return self.raw_name + struct.pack("!HH", self.qtype, self.qclass)


@dataclass(frozen=True, slots=True)
class Rejected:
    id: int
    flags: int
    rcode: Rcode
    question: bytes = b""  # raw name, type and class when they could be read
    edns: Edns | None = None


class _Malformed(Exception):
    pass


def parse_query(data: bytes) -> Query | Rejected | None:
    if len(data) < HEADER.size:
        return None
    qid, flags, qd, an, ns, ar = HEADER.unpack_from(data)
    if flags & QR:
        return None
    if flags & OPCODE_MASK:
        return Rejected(qid, flags, Rcode.NOTIMP)
    if qd != 1 or an or ns:
        return Rejected(qid, flags, Rcode.FORMERR)
    try:
        raw_name, labels, end = _read_question_name(data, HEADER.size)
        if end + 4 > len(data):
            raise _Malformed("question cut short")
        qtype, qclass = struct.unpack_from("!HH", data, end)
        edns, plain = _read_additional(data, end + 4, ar)
    except _Malformed:
        return Rejected(qid, flags, Rcode.FORMERR)
    if edns is not None and edns.version != 0:
        return Rejected(qid, flags, Rcode.BADVERS, raw_name + data[end:end + 4], edns)
    return Query(qid, flags, raw_name, labels, qtype, qclass, edns, plain)


def _read_question_name(data: bytes, pos: int) -> tuple[bytes, Name, int]:
    """Labels without compression (a question has nothing before it to point at)."""
    start, labels = pos, []
    while True:
        if pos >= len(data):
            raise _Malformed("name runs past the end")
        length = data[pos]
        if length == 0:
            pos += 1
            break
        if length > 63 or pos + 1 + length > len(data):
            raise _Malformed("bad label")
        labels.append(lower_label(data[pos + 1:pos + 1 + length]))
        pos += 1 + length
    if pos - start > MAX_NAME:
        raise _Malformed("name too long")
    return data[start:pos], tuple(labels), pos


def _skip_name(data: bytes, pos: int) -> int:
    while True:
        if pos >= len(data):
            raise _Malformed("name runs past the end")
        length = data[pos]
        if length & 0xC0 == 0xC0:
            return pos + 2
        if length > 63:
            raise _Malformed("bad label")
        pos += 1 + length
        if length == 0:
            return pos


def _read_additional(data: bytes, pos: int, count: int) -> tuple[Edns | None, bool]:
    edns: Edns | None = None
    plain = count <= 1
    for _ in range(count):
        name_start = pos
        pos = _skip_name(data, pos)
        if pos + 10 > len(data):
            raise _Malformed("record cut short")
        rtype, rclass, ttl, rdlen = struct.unpack_from("!HHIH", data, pos)
        pos += 10 + rdlen
        if pos > len(data):
            raise _Malformed("rdata cut short")
        if rtype == RType.OPT:
            if edns is not None or data[name_start] != 0:
                raise _Malformed("a second OPT, or an OPT not at the root")
            _check_options(data, pos - rdlen, pos)
            edns = Edns(max(512, rclass), (ttl >> 16) & 0xFF, bool(ttl & 0x8000))
            plain = plain and rdlen == 0
        else:
            plain = False
    if pos != len(data):
        raise _Malformed("bytes after the last record")
    return edns, plain


def _check_options(data: bytes, pos: int, end: int) -> None:
    while pos < end:
        if pos + 4 > end:
            raise _Malformed("EDNS option cut short")
        pos += 4 + struct.unpack_from("!H", data, pos + 2)[0]
    if pos != end:
        raise _Malformed("EDNS option runs past its record")


def reply_limit(edns: Edns | None, tcp: bool) -> int:
    if tcp:
        return TCP_LIMIT
    if edns is None:
        return 512
    return max(b for b in UDP_BUCKETS if b <= edns.udp_size)


# --- encoding ------------------------------------------------------------------------------------


class _Buffer(DNSBuffer):  # type: ignore[misc]
    """dnslib's buffer, with name compression that ignores ASCII case where the query's case is echoed.

    Names are written in one of two ways, as CoreDNS writes them. *Echoed*: the owner names of the
    records for the question itself and of the authority section compress case-insensitively, so
    they point into the question and repeat the query's case. *Canonical*: every other name (record
    data such as SRV and CNAME targets, owners of other names' records, the additional section) keeps
    the view's case below the zone and points only at names written the same way; only its zone part
    points case-insensitively, so the zone repeats the query's case. Either way every byte that
    depends on the query's case is a pointer into the question, and a cached reply stays byte-exact
    for every casing once its question is patched."""

    def __init__(self, data: bytes, zone: tuple[bytes, ...]) -> None:
        super().__init__(data)
        self.zone = zone
        self.echo_next = False  # how to write the next name (an RR's owner); its data is canonical
        self.exact: dict[tuple[bytes, ...], int] = {}

    def encode_name(self, name: DNSLabel | str) -> None:
        labels = list((name if isinstance(name, DNSLabel) else DNSLabel(name)).label)
        echo, self.echo_next = self.echo_next, False
        while labels:
            lower = tuple(x.lower() for x in labels)
            in_zone = echo or (len(lower) <= len(self.zone) and lower == self.zone[len(self.zone) - len(lower):])
            names, key = (self.names, lower) if in_zone else (self.exact, tuple(labels))
            pointer = names.get(key)
            if pointer is not None:
                self.pack("!H", 0xC000 | pointer)
                return
            if self.offset < 0x4000:
                names[key] = self.offset
            label = labels.pop(0)
            self.pack("!B", len(label))
            self.append(label)
        self.append(b"\x00")


def _label(name: Name) -> DNSLabel:
    return DNSLabel([x.encode("latin-1") for x in name])


def _rdata(rec: Record) -> object:
    d = rec.data
    if isinstance(d, tuple):
        return CNAME(_label(d)) if rec.rtype == RType.CNAME else PTR(_label(d))
    if isinstance(d, Srv):
        return SRV(d.priority, d.weight, d.port, _label(d.target))
    if isinstance(d, Soa):
        return SOA(_label(d.mname), _label(d.rname), (d.serial, d.refresh, d.retry, d.expire, d.minimum))
    if isinstance(d, Txt):
        return TXT([d.text.encode()])
    return A(str(d)) if rec.rtype == RType.A else AAAA(str(d))


def to_rr(rec: Record) -> RR:
    return RR(_label(rec.name), int(rec.rtype), 1, rec.ttl, _rdata(rec))


def encode(query: Query, reply: Reply, limit: int, extra: Sequence[RR] = (), extra_authority: Sequence[RR] = (),
           truncated: bool = False, zone: Name = ()) -> bytes:
    """The reply to `query`. A chased CNAME brings the upstream's records: `extra` are appended to the
    answer, `extra_authority` (the SOA of its NXDOMAIN or NODATA) to the authority, and `truncated`
    keeps the upstream's TC bit. `zone` (the cluster zone) is written in the query's case wherever it
    ends a name (see _Buffer)."""
    answer = [to_rr(r) for r in reply.answer] + list(extra)
    authority = [to_rr(r) for r in reply.authority] + list(extra_authority)
    sections = (answer, authority, [to_rr(r) for r in reply.additional])
    buf = _Buffer(b"\x00" * HEADER.size, tuple(x.encode("latin-1") for x in zone))
    buf.offset = HEADER.size
    question = _raw_labels(query.raw_name)
    buf.echo_next = True  # the question as received: every echoed name points into it
    buf.encode_name(DNSLabel(question))
    buf.pack("!HH", query.qtype, query.qclass)
    asked = tuple(x.lower() for x in question)
    ends = [len(buf.data)]
    for index, section in enumerate(sections):
        for rr in section:
            buf.echo_next = index == 1 or (index == 0 and tuple(x.lower() for x in rr.rname.label) == asked)
            rr.pack(buf)
            ends.append(len(buf.data))
    opt = _opt(query.edns, reply.rcode)
    kept = _fitting(ends, limit - len(opt))
    counts = _counts([len(s) for s in sections], kept)
    cut = truncated or kept < len(answer) + len(sections[1])
    flags = _flags(query.flags, reply.rcode, reply.authoritative, cut)
    header = HEADER.pack(query.id, flags, 1, counts[0], counts[1], counts[2] + (1 if opt else 0))
    return header + bytes(buf.data[HEADER.size:ends[kept]]) + opt


def _fitting(ends: list[int], room: int) -> int:
    """How many records (after the question) fit in `room` bytes."""
    kept = len(ends) - 1
    while kept > 0 and ends[kept] > room:
        kept -= 1
    return kept


def _counts(sizes: list[int], kept: int) -> tuple[int, int, int]:
    an = min(sizes[0], kept)
    ns = min(sizes[1], kept - an)
    return an, ns, min(sizes[2], kept - an - ns)


def _raw_labels(raw_name: bytes) -> list[bytes]:
    labels, pos = [], 0
    while raw_name[pos]:
        labels.append(raw_name[pos + 1:pos + 1 + raw_name[pos]])
        pos += 1 + raw_name[pos]
    return labels


def _flags(query_flags: int, rcode: Rcode, authoritative: bool, truncated: bool) -> int:
    flags = QR | (query_flags & (OPCODE_MASK | RD)) | RA | (rcode & 0xF)
    if authoritative:
        flags |= AA
    if truncated:
        flags |= TC
    return flags


def _opt(edns: Edns | None, rcode: int) -> bytes:
    if edns is None:
        return b""
    return struct.pack("!BHHBBHH", 0, RType.OPT, ADVERTISED_UDP_SIZE, rcode >> 4, 0, 0, 0)


def encode_rejected(rej: Rejected) -> bytes:
    opt = _opt(rej.edns, rej.rcode)
    flags = QR | (rej.flags & (OPCODE_MASK | RD)) | RA | (rej.rcode & 0xF)
    header = HEADER.pack(rej.id, flags, 1 if rej.question else 0, 0, 0, 1 if opt else 0)
    return header + rej.question + opt
