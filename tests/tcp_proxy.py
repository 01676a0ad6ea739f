"""A TCP forwarder in front of the test server that fails on command, as networks do.

``blackhole()``: every byte is dropped both ways and new connections are accepted and never
answered (an unreachable server behind a firewall that drops packets). ``refuse()``: every
connection is reset and new ones are refused (a server that is down; ``restore()`` brings it
back). ``sever()``: the server
side of every open connection is closed, the client side is left open and silent and reset at
its next write (a NAT or load balancer that forgot idle flows), or at once when it waits for the
answer to what it sent (a worker polling at that moment: it would wait for ever); new
connections work.
"""

from __future__ import annotations

import socket
import struct
import threading
from urllib.parse import urlsplit, urlunsplit


class _Pair:
    def __init__(self, client: socket.socket, server: socket.socket) -> None:
        self.client = client
        self.server = server
        self.severed = False
        self.in_flight = False  # the last bytes went from the client: it waits for an answer


def _hang_up(sock: socket.socket) -> None:
    """Close a socket another thread may be blocked on (close() alone leaves it open)."""
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass
    sock.close()


def _reset(sock: socket.socket) -> None:
    """Close with an RST. The shutdown wakes a pump thread blocked in recv() on this socket:
    while one is, close() alone sends nothing, and a client waiting for its answer waits for
    ever (the kernel keeps the socket for the blocked call)."""
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    except OSError:
        return
    try:
        sock.shutdown(socket.SHUT_RD)  # no FIN; the blocked recv() returns b""
    except OSError:
        pass
    sock.close()


class TcpProxy:
    def __init__(self, target_url: str) -> None:
        parts = urlsplit(target_url)
        self._target_url = parts
        self._target = (parts.hostname, parts.port)
        self._listener = socket.create_server(("127.0.0.1", 0))
        self.port = self._listener.getsockname()[1]
        self._pairs: list[_Pair] = []
        self._held: list[socket.socket] = []  # accepted while black-holed
        self._lock = threading.Lock()
        self.blackholed = False
        self.refused = False
        threading.Thread(target=self._accept, daemon=True).start()

    @property
    def url(self) -> str:
        netloc = self._target_url.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        return urlunsplit(
            self._target_url._replace(netloc=f"{netloc[0]}@{host}" if len(netloc) == 2 else host)
        )

    def blackhole(self) -> None:
        self.blackholed = True

    def refuse(self) -> None:
        self.refused = True
        try:  # wakes the thread blocked in accept(); close() alone keeps the port listening
            self._listener.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self._listener.close()
        with self._lock:
            for pair in self._pairs:
                _hang_up(pair.client)
                _hang_up(pair.server)

    def restore(self) -> None:
        """After ``refuse()``: listen on the same port again (the server is back)."""
        self._listener = socket.create_server(("127.0.0.1", self.port))
        self.refused = False
        threading.Thread(target=self._accept, daemon=True).start()

    def sever(self) -> None:
        with self._lock:
            pairs, self._pairs = self._pairs, []
        for pair in pairs:
            pair.severed = True
            _hang_up(pair.server)
            if pair.in_flight:  # its answer is lost with the flow: it would wait for ever
                _reset(pair.client)

    def close(self) -> None:
        self.refuse()
        for sock in self._held:
            _hang_up(sock)

    def _accept(self) -> None:
        while True:
            try:
                client, _ = self._listener.accept()
            except OSError:
                return
            if self.refused:
                _reset(client)
                return
            if self.blackholed:
                self._held.append(client)
                continue
            try:
                server = socket.create_connection(self._target)
            except OSError:
                _reset(client)
                continue
            pair = _Pair(client, server)
            with self._lock:
                self._pairs.append(pair)
            threading.Thread(target=self._pump, args=(pair, True), daemon=True).start()
            threading.Thread(target=self._pump, args=(pair, False), daemon=True).start()

    def _pump(self, pair: _Pair, from_client: bool) -> None:
        source, target = (pair.client, pair.server) if from_client else (pair.server, pair.client)
        try:
            while data := source.recv(65536):
                if pair.severed:
                    if from_client:
                        _reset(pair.client)  # the forgotten flow answers its next write
                    return
                if not self.blackholed:
                    pair.in_flight = from_client
                    target.sendall(data)
        except OSError:
            pass
        if pair.severed:
            # a request that was on its way when the flow was forgotten gets no answer: reset,
            # or the client (its statement sent) waits for ever, as no later write comes
            if from_client and pair.in_flight:
                _reset(pair.client)
            return
        if self.blackholed:
            return
        _hang_up(pair.client)
        _hang_up(pair.server)
