"""The TCP forwarder the fault tests stand on (tests/tcp_proxy.py) fails the way it says: a
client whose request was on its way when the flow was severed is reset, not left waiting.
"""

from __future__ import annotations

import socket
import time

import pytest
from helpers import wait_until
from tcp_proxy import TcpProxy


@pytest.fixture
def silent_server():
    """A server that accepts and never answers (the answer is what the severed flow loses)."""
    server = socket.create_server(("127.0.0.1", 0))
    yield server
    server.close()


@pytest.fixture
def flow(silent_server):
    """A client connected through the forwarder, and the server's side of its connection."""
    proxy = TcpProxy(f"postgres://u@127.0.0.1:{silent_server.getsockname()[1]}/d")
    client = socket.create_connection(("127.0.0.1", proxy.port))
    accepted, _ = silent_server.accept()
    wait_until(lambda: len(proxy._pairs) == 1, timeout=5)
    client.settimeout(5)
    yield proxy, client, accepted
    client.close()
    accepted.close()
    proxy.close()


def test_a_client_waiting_for_its_answer_is_reset_by_sever(flow):
    proxy, client, accepted = flow
    client.sendall(b"SELECT 1")
    assert accepted.recv(16) == b"SELECT 1"  # forwarded: the client now waits
    wait_until(lambda: proxy._pairs[0].in_flight, timeout=5)
    proxy.sever()
    started = time.monotonic()
    with pytest.raises(ConnectionResetError):
        client.recv(16)
    assert time.monotonic() - started < 1


def test_an_idle_client_is_reset_at_its_next_write(flow):
    proxy, client, accepted = flow
    proxy.sever()
    client.sendall(b"SELECT 1")  # the forgotten flow answers with an RST
    with pytest.raises((ConnectionResetError, BrokenPipeError)):
        client.recv(16)
        client.sendall(b"SELECT 2")
    assert accepted.recv(16) == b""  # the server side was closed, nothing forwarded
