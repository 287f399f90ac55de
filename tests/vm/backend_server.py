"""A stdlib-only backend for the IPVS VM tests, run inside the pods namespace:

    python backend_server.py IP:PORT/tcp IP:PORT/udp ...

Every TCP connection is greeted with "IP:PORT\\n" (the real server that got it) and then echoed; every
UDP datagram is answered with "IP:PORT". One process, one thread, a selector: Python is slow in
the VM, so nothing is forked per connection. Prints "ready" once every socket listens.
"""

from __future__ import annotations

import selectors
import socket
import sys


def main(specs: list[str]) -> None:
    sel = selectors.DefaultSelector()
    for spec in specs:
        addr, proto = spec.rsplit("/", 1)
        host, port = addr.rsplit(":", 1)
        kind = socket.SOCK_STREAM if proto == "tcp" else socket.SOCK_DGRAM
        s = socket.socket(socket.AF_INET, kind)
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        s.bind((host, int(port)))
        if kind == socket.SOCK_STREAM:
            s.listen(128)
        s.setblocking(False)
        sel.register(s, selectors.EVENT_READ, ("listen" if kind == socket.SOCK_STREAM else "udp", addr))
    print("ready", flush=True)
    while True:
        for key, _ in sel.select():
            role, addr = key.data
            sock = key.fileobj
            if role == "listen":
                conn, _ = sock.accept()
                conn.setblocking(False)
                conn.send(f"{addr}\n".encode())
                sel.register(conn, selectors.EVENT_READ, ("conn", addr))
            elif role == "udp":
                data, peer = sock.recvfrom(2048)
                sock.sendto(addr.encode(), peer)
            else:
                try:
                    data = sock.recv(2048)
                except OSError:
                    data = b""
                if data:
                    sock.send(data)
                else:
                    sel.unregister(sock)
                    sock.close()


if __name__ == "__main__":
    main(sys.argv[1:])
