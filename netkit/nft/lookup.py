"""Whether nftables tables and chains exist, asked by name over netfilter netlink.

`nft list tables` and `nft -c delete table` both read the whole ruleset before they answer: 0.45 s
each beside 10,000 services of iptables-nft rules, and `iptables-nft-save` (where iptables-nft's
hint chains would be looked for) 2.2 s. NFT_MSG_GETTABLE and NFT_MSG_GETCHAIN of one object by
name, not a dump, are a round trip each whatever else the namespace holds. The requests and the
reading of the answers are pure; `tables` and `chains` open one socket in the namespace for all
their questions, and answer None when it cannot be opened or asked (the caller falls back to the
tools).
"""

from __future__ import annotations

import errno
import os
import socket
import struct
from collections.abc import Callable, Sequence
from functools import partial

from netkit.nft.generation import netfilter_socket
from netkit.nft.netlink import (
    FAMILIES,
    NFNL_SUBSYS_NFTABLES,
    NFTA_CHAIN_NAME,
    NLM_F_ACK,
    NLM_F_REQUEST,
    NLMSG_ERROR,
    TABLE,
    message,
    strz,
)

NFT_MSG_NEWTABLE, NFT_MSG_GETTABLE, NFT_MSG_NEWCHAIN, NFT_MSG_GETCHAIN = 0, 1, 3, 4
NFTA_TABLE_NAME = 1
_HEADER = struct.Struct("=IHHII")


def table_request(family: str, name: str, seq: int) -> bytes:
    """NFT_MSG_GETTABLE of one table by name, acknowledged: the kernel answers with the table and
    an acknowledgement, or with ENOENT."""
    return message(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETTABLE, FAMILIES[family], seq, NLM_F_REQUEST | NLM_F_ACK,
                   strz(NFTA_TABLE_NAME, name))


def chain_request(family: str, table: str, name: str, seq: int) -> bytes:
    """NFT_MSG_GETCHAIN of one chain of `table` by name, answered as `table_request` is."""
    return message(NFNL_SUBSYS_NFTABLES << 8 | NFT_MSG_GETCHAIN, FAMILIES[family], seq, NLM_F_REQUEST | NLM_F_ACK,
                   strz(TABLE, table) + strz(NFTA_CHAIN_NAME, name))


def answer(data: bytes, seq: int, found: int = NFT_MSG_NEWTABLE) -> bool | None:
    """Whether the replies in `data` to request `seq` say the object exists (its message of kind
    `found`, NEWTABLE or NEWCHAIN, came); False for ENOENT; None while neither has come (the
    acknowledgement follows the object). Any other error is raised."""
    offset = 0
    while offset + _HEADER.size <= len(data):
        length, kind, _, got, _ = _HEADER.unpack_from(data, offset)
        if length < _HEADER.size:
            return None
        if got == seq:
            if kind == NFNL_SUBSYS_NFTABLES << 8 | found:
                return True
            if kind == NLMSG_ERROR and offset + _HEADER.size + 4 <= len(data):
                code = struct.unpack_from("=i", data, offset + _HEADER.size)[0]
                if code == -errno.ENOENT:
                    return False
                if code:
                    raise OSError(-code, os.strerror(-code))
        offset += (length + 3) & ~3
    return None


def tables(netns: str | None, family: str, names: Sequence[str]) -> tuple[str, ...] | None:
    """Which of `names` exist in `family` ("ip", "ip6") in `netns`; None when it cannot be asked."""
    there = _ask(netns, [(partial(table_request, family, n), NFT_MSG_NEWTABLE) for n in names])
    return None if there is None else tuple(n for n, yes in zip(names, there, strict=True) if yes)


def chains(netns: str | None, family: str, pairs: Sequence[tuple[str, str]]) -> tuple[tuple[str, str], ...] | None:
    """Which of the (table, chain) pairs exist in `family` in `netns`; None when it cannot be asked."""
    there = _ask(netns, [(partial(chain_request, family, t, c), NFT_MSG_NEWCHAIN) for t, c in pairs])
    return None if there is None else tuple(p for p, yes in zip(pairs, there, strict=True) if yes)


def _ask(netns: str | None, requests: Sequence[tuple[Callable[[int], bytes], int]]) -> list[bool] | None:
    """Each request (made for its sequence number) in turn on one socket in `netns`, with the kind
    of message that says its object exists; None when the socket cannot be opened or used."""
    try:
        with netfilter_socket(netns) as sock:
            sock.settimeout(5)
            return [_one(sock, request, seq, found) for seq, (request, found) in enumerate(requests, 1)]
    except OSError:
        return None


def _one(sock: socket.socket, request: Callable[[int], bytes], seq: int, found: int) -> bool:
    sock.send(request(seq))
    got = None
    while got is None:
        got = answer(sock.recv(1 << 16), seq, found)
    return got
