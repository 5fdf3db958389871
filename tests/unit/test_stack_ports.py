"""stack/ports.py: the process in a component's way is named before it starts, on real
sockets of this test process (and on a hand-written /proc table for the parsing)."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from paystream.stack import ports
from paystream.stack.process import StackError


def _listener(family: int = socket.AF_INET, host: str = "127.0.0.1") -> socket.socket:
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.bind((host, 0))
    sock.listen()
    return sock


def test_a_listening_socket_is_named_with_its_process_and_the_setting_to_change() -> None:
    with _listener() as sock:
        port = sock.getsockname()[1]
        found = ports.holder(port)
        assert found is not None and found.startswith(f"pid {os.getpid()}: ")
        assert "pytest" in found or "python" in found
        with pytest.raises(StackError) as raised:
            ports.ensure_free("pgbouncer", port, "PAYSTREAM_PGBOUNCER_PORT")
    message = str(raised.value)
    assert message.startswith("[pgbouncer] ")
    assert f"port {port} is taken by pid {os.getpid()}" in message
    assert "PAYSTREAM_PGBOUNCER_PORT" in message
    # Closed: the port is free again.
    assert ports.holder(port) is None
    ports.ensure_free("pgbouncer", port, "PAYSTREAM_PGBOUNCER_PORT")


def test_an_ipv6_listener_counts_too() -> None:
    with _listener(socket.AF_INET6, "::1") as sock:
        found = ports.holder(sock.getsockname()[1])
    assert found is not None and found.startswith(f"pid {os.getpid()}: ")


def test_a_connected_socket_on_the_port_is_not_a_listener() -> None:
    # The client end of a connection has a local port too, in state ESTABLISHED: it
    # does not stop a server from listening there, so it must not be reported.
    with _listener() as server, socket.create_connection(server.getsockname()) as client:
        client_port = client.getsockname()[1]
        accepted, _ = server.accept()
        with accepted:
            assert ports.holder(client_port) is None
            assert ports.holder(server.getsockname()[1]) is not None


def test_the_proc_table_is_read_by_state_and_hex_port(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    header = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt" \
             "   uid  timeout inode\n"
    (tmp_path / "net" / "tcp").write_text(header + "".join([
        # 6450 = 0x1932, LISTEN (0A), inode 111
        "   0: 0100007F:1932 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
        "   107        0 111 1 0000000000000000 100 0 0 10 0\n",
        # the same port, ESTABLISHED (01): not a listener
        "   1: 0100007F:1932 0100007F:D431 01 00000000:00000000 00:00000000 00000000"
        "   107        0 222 1 0000000000000000 20 4 30 10 -1\n",
        # another port listening
        "   2: 00000000:1F90 00000000:0000 0A 00000000:00000000 00:00000000 00000000"
        "     0        0 333 1 0000000000000000 100 0 0 10 0\n",
    ]))
    (tmp_path / "net" / "tcp6").write_text(header + (
        "   0: 00000000000000000000000001000000:1932 00000000000000000000000000000000:0000"
        " 0A 00000000:00000000 00:00000000 00000000     0        0 444 1 0 100 0 0 10 0\n"))
    assert ports.listening_inodes(6450, tmp_path) == {111, 444}
    assert ports.listening_inodes(8080, tmp_path) == {333}
    assert ports.listening_inodes(5432, tmp_path) == set()
    # Listening, but no process of this fake /proc holds the socket.
    assert ports.holder(8080, tmp_path) == "a process this user cannot see"
