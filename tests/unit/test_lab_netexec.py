"""The lab pods' agnhost netexec answers (netkit/lab/cluster/netexec.py): what the upstream e2e tests
ask of netexec, answered as netexec answers it."""

from __future__ import annotations

import pytest

from netkit.lab.cluster import netexec

V4, V6 = ("10.244.1.5", 41234), ("fd00:244::5", 41234, 0, 0)


@pytest.mark.parametrize(("datagram", "answer"), [
    (b"hostname", b"web-1"),
    (b"hostname\n", b"web-1"),             # `echo hostname | nc -u`: trimmed
    (b"HOSTNAME", b"web-1"),               # netexec lower-cases the datagram first
    (b"echo " + b"n" + b"o" * 1999, b"n" + b"o" * 1999),  # the large-request test's message
    (b"echo Hi There", b"hi there"),       # lower-cased, as netexec echoes it
    (b"clientip", b"10.244.1.5:41234"),
])
def test_udp_commands(datagram: bytes, answer: bytes) -> None:
    assert netexec.udp_answer(datagram, "web-1", V4) == answer


def test_udp_clientip_of_ipv6_is_bracketed_and_an_unknown_command_gets_no_answer() -> None:
    assert netexec.udp_answer(b"clientip", "web-1", V6) == b"[fd00:244::5]:41234"
    assert netexec.udp_answer(b"what", "web-1", V4) is None
    assert netexec.udp_answer(b"", "web-1", V4) is None
    assert netexec.udp_answer(b"echo ", "web-1", V4) is None  # trimmed first: "echo" is no command


def get(path: str, peer: tuple[str, int] | tuple[str, int, int, int] = V4) -> tuple[str, dict[str, str], str]:
    raw = netexec.http_answer(f"GET {path} HTTP/1.1\r\nHost: x\r\n\r\n".encode(), "web-1", peer).decode()
    head, _, body = raw.partition("\r\n\r\n")
    status, *headers = head.split("\r\n")
    return status, dict(h.split(": ", 1) for h in headers), body


@pytest.mark.parametrize(("path", "body"), [
    ("/hostname", "web-1"),
    ("/hostName", "web-1"),
    ("/clientip", "10.244.1.5:41234"),
    ("/echo?msg=" + "42" * 1000, "42" * 1000),
    ("/echo?msg=a%20b&x=1", "a b"),
    ("/echo", ""),
    ("/healthz", ""),
])
def test_http_paths(path: str, body: str) -> None:
    status, headers, got = get(path)
    assert (status, got) == ("HTTP/1.1 200 OK", body)
    assert headers["Content-Length"] == str(len(body.encode())) and headers["Connection"] == "close"


def test_http_echo_with_a_status_code_and_the_root() -> None:
    assert get("/echo?msg=gone&code=503")[::2] == ("HTTP/1.1 503 Service Unavailable", "gone")
    assert get("/echo?msg=x&code=abc")[2] == "argument 'code' must be an integer or empty, got 'abc'\n"
    assert get("/")[2].startswith("NOW: ") and get("/anything")[2].startswith("NOW: ")
    assert get("/clientip", V6)[2] == "[fd00:244::5]:41234"


def test_a_request_that_is_not_http_is_a_bad_request() -> None:
    assert netexec.http_answer(b"hello\r\n\r\n", "web-1", V4).startswith(b"HTTP/1.1 400 Bad Request\r\n")
