"""The lab's answering servers for one pod, inside the control plane's event loop.

The same protocol and sockets as the lab's pod servers (`netkit.lab.servers`: `bind`, `answer`):
every TCP connection gets `<pod> <source-it-saw>` on accept and again for every chunk received, every
UDP datagram gets it back, on each of the cluster's IP families. Serving pods in the control plane's
loop (rather than one process per pod) lets `scale` and `drain` start and stop single pods at once:
`close()` closes the listeners and every open connection, so the namespace can be deleted right after.

Beside them every pod serves agnhost netexec's HTTP and UDP commands (`netexec`) on netexec's ports,
as the pod's hostname.
"""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Sequence
from functools import partial
from typing import cast

from netkit.lab.cluster import netexec
from netkit.lab.servers import answer, bind
from netkit.netns import in_netns


class UdpEcho(asyncio.DatagramProtocol):
    def __init__(self, pod: str) -> None:
        self.pod = pod
        self.transport: asyncio.DatagramTransport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = cast(asyncio.DatagramTransport, transport)  # the selector's: no subclass

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        if self.transport is not None:
            self.transport.sendto(answer(self.pod, addr), addr)


class UdpNetexec(UdpEcho):
    """netexec's UDP server: `hostname`, `echo <msg>`, `clientip`."""

    def datagram_received(self, data: bytes, addr: tuple[str, int]) -> None:
        reply = netexec.udp_answer(data, self.pod, addr)
        if self.transport is not None and reply is not None:
            self.transport.sendto(reply, addr)


class EchoPod:
    def __init__(self, pod: str, netns: str, ports: Sequence[int],
                 families: Sequence[int] = (socket.AF_INET,), hostname: str = "") -> None:
        self.pod, self.netns, self.ports, self.families = pod, netns, tuple(ports), tuple(families)
        self.hostname = hostname or pod  # kubelet's: spec.hostname, else the pod's name
        self.servers: list[asyncio.Server] = []
        self.transports: list[asyncio.BaseTransport] = []
        self.writers: set[asyncio.StreamWriter] = set()

    async def start(self) -> None:
        loop = asyncio.get_running_loop()
        for port in self.ports:
            for family in self.families:
                tcp = in_netns(self.netns, partial(bind, family, socket.SOCK_STREAM, port))
                self.servers.append(await asyncio.start_server(self.handle, sock=tcp))
                udp = in_netns(self.netns, partial(bind, family, socket.SOCK_DGRAM, port))
                transport, _ = await loop.create_datagram_endpoint(lambda: UdpEcho(self.pod), sock=udp)
                self.transports.append(transport)
        for family in self.families:
            await self.start_netexec(family)

    async def start_netexec(self, family: int) -> None:
        tcp = in_netns(self.netns, partial(bind, family, socket.SOCK_STREAM, netexec.HTTP_PORT))
        self.servers.append(await asyncio.start_server(self.handle_http, sock=tcp))
        udp = in_netns(self.netns, partial(bind, family, socket.SOCK_DGRAM, netexec.UDP_PORT))
        loop = asyncio.get_running_loop()
        transport, _ = await loop.create_datagram_endpoint(lambda: UdpNetexec(self.hostname), sock=udp)
        self.transports.append(transport)

    async def handle_http(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        """One netexec HTTP request, answered, then the connection closed."""
        self.writers.add(writer)
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            writer.write(netexec.http_answer(head, self.hostname, writer.get_extra_info("peername")))
            await writer.drain()
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.writers.add(writer)
        peer = writer.get_extra_info("peername")
        try:
            writer.write(answer(self.pod, peer))
            while await reader.read(65536):
                writer.write(answer(self.pod, peer))
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.writers.discard(writer)
            writer.close()

    def close(self) -> None:
        for server in self.servers:
            server.close()
        for transport in self.transports:
            transport.close()
        for writer in list(self.writers):
            writer.transport.abort()
        self.servers, self.transports = [], []
