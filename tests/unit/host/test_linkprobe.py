"""One host's side of the link check, over real sockets on this host's loopback: a listener counts what a
sender streams, knows the sender by name, drops a connection without the job's key, and a peer that is not
there is an error named in time, not a hang."""

from __future__ import annotations

import socket
import time

from mpiray.deadline import Deadline
from mpiray.host.linkprobe import KEY_BYTES, WINDOW, Listener, send_to

KEY = bytes(range(KEY_BYTES))


def test_a_listener_measures_what_a_peer_streams_and_the_peer_its_round_trips():
    listener = Listener("127.0.0.1")
    try:
        deadline = Deadline.after(10)
        listener.serve(KEY, expected=1, deadline=deadline)
        trip, error = send_to(listener.address, KEY, "peer-a")
        figures = listener.wait(deadline)
    finally:
        listener.close()
    assert error == "" and 0 < trip < 100
    assert list(figures.received) == ["peer-a"] and figures.received["peer-a"] > 100  # Mbit/s: loopback is far faster


def test_a_connection_without_the_jobs_key_is_closed_unmeasured():
    listener = Listener("127.0.0.1")
    try:
        deadline = Deadline.after(10)
        listener.serve(KEY, expected=1, deadline=deadline)  # the stranger takes no peer's place
        host, port = listener.address.rsplit(":", 1)
        with socket.create_connection((host, int(port)), timeout=5) as stranger:
            stranger.sendall(b"x" * KEY_BYTES + b"\x05evil!" + b"s" + b"\0" * 4096)
            stranger.settimeout(5)
            try:
                assert stranger.recv(1) == b""  # closed on it
            except ConnectionResetError:  # closed on it, with what it sent unread
                pass
        trip, error = send_to(listener.address, KEY, "peer-b")
        figures = listener.wait(deadline)
    finally:
        listener.close()
    assert error == "" and set(figures.received) == {"peer-b"}


def test_a_peer_that_is_not_listening_is_an_error_at_once():
    listener = Listener("127.0.0.1")
    address = listener.address
    listener.close()  # nothing listens there now
    started = time.monotonic()
    trip, error = send_to(address, KEY, "peer-c")
    assert trip == 0 and error.startswith("ConnectionRefusedError")
    assert time.monotonic() - started < 1


def test_the_stream_lasts_about_the_window():
    listener = Listener("127.0.0.1")
    try:
        deadline = Deadline.after(10)
        listener.serve(KEY, expected=1, deadline=deadline)
        started = time.monotonic()
        send_to(listener.address, KEY, "peer-d")
        took = time.monotonic() - started
        listener.wait(deadline)
    finally:
        listener.close()
    assert WINDOW <= took < WINDOW * 1.2 + 0.1 + 1.0
