"""What agnhost's `netexec` answers, the part Kubernetes' e2e network tests use: bytes in, bytes out.

Every lab pod serves it beside the lab's own protocol (`echo`), on the ports upstream's
NetworkingTestConfig gives its netserver pods (`netexec --http-port=8083 --udp-port=8081`), so a
translated test asks what the upstream test asks:

- HTTP: `/hostname` (and the older `/hostName`) the pod's hostname, `/clientip` the client's
  address and port as the pod saw them, `/echo?msg=M[&code=N]` M (with status N), `/healthz` 200,
  anything else `NOW: <time>` (netexec's root handler). One request per connection.
  The client's address is as Go's RemoteAddr prints it (an IPv6 host in brackets).
- UDP: `hostname`, `echo <msg>` (msg back), `clientip`; netexec trims and lower-cases the datagram
  first, and answers nothing to anything else.

The hostname is kubelet's: the pod's `spec.hostname` if it has one, else its name.
"""

from __future__ import annotations

import time
from http import HTTPStatus
from urllib.parse import parse_qs, urlsplit

from netkit.lab.cluster.plan import NETEXEC_HTTP_PORT, NETEXEC_UDP_PORT
from netkit.lab.servers import peer_text

HTTP_PORT, UDP_PORT = NETEXEC_HTTP_PORT, NETEXEC_UDP_PORT


def udp_answer(datagram: bytes, hostname: str, peer: tuple[str, int] | tuple[str, int, int, int]) -> bytes | None:
    """netexec's startUDPServer: the answer to one datagram, None for an unknown command."""
    text = datagram.decode(errors="replace").strip().lower()
    if text == "hostname":
        return hostname.encode()
    if text.startswith("echo "):
        return text.split(" ", 1)[1].encode()
    if text == "clientip":
        return peer_text(peer).encode()
    return None


def http_answer(head: bytes, hostname: str, peer: tuple[str, int] | tuple[str, int, int, int]) -> bytes:
    """The whole HTTP/1.1 response to a request whose line and headers are `head`."""
    line = head.split(b"\r\n", 1)[0].decode(errors="replace").split()
    if len(line) != 3 or not line[2].startswith("HTTP/"):
        return response(HTTPStatus.BAD_REQUEST, "bad request")
    url = urlsplit(line[1])
    query = parse_qs(url.query, keep_blank_values=True)
    if url.path in ("/hostname", "/hostName"):
        return response(HTTPStatus.OK, hostname)
    if url.path == "/clientip":
        return response(HTTPStatus.OK, peer_text(peer))
    if url.path == "/echo":
        return echo(query)
    if url.path == "/healthz":
        return response(HTTPStatus.OK, "")
    return response(HTTPStatus.OK, f"NOW: {time.strftime('%Y-%m-%d %H:%M:%S %z')}")


def echo(query: dict[str, list[str]]) -> bytes:
    """`/echo?msg=M&code=N`: M, with status N when given (netexec's echoHandler)."""
    msg, code = query.get("msg", [""])[0], query.get("code", [""])[0]
    if not code:
        return response(HTTPStatus.OK, msg)
    if not code.isdigit() or int(code) not in {s.value for s in HTTPStatus}:
        return response(HTTPStatus.OK, f"argument 'code' must be an integer or empty, got {code!r}\n")
    return response(HTTPStatus(int(code)), msg)


def response(status: HTTPStatus, body: str) -> bytes:
    data = body.encode()
    head = (f"HTTP/1.1 {status.value} {status.phrase}\r\nContent-Type: text/plain; charset=utf-8\r\n"
            f"Content-Length: {len(data)}\r\nConnection: close\r\n\r\n")
    return head.encode() + data
