"""The link check of the pre-flight, one host's side: TCP between the hosts' first ranks, on the addresses their
Ray nodes will advertise (the interface Ray and gloo will use), before any Ray starts.

Each taking part listens (Listener) and sends to its peers (send_to). One connection measures one direction:
the sender first makes PINGS 1-byte round trips (the latency, its figure), then streams for a little longer than
WINDOW; the receiver counts what arrives in the WINDOW seconds after the first byte (the bandwidth, its figure).
A connection opens with the job's key (16 random bytes from rank 0), so another user's connection is closed
unanswered. Every step has a deadline: a peer that does not answer is an error in the figures, never a hang.
The verdict across hosts is rank/linkcheck.py's.
"""

from __future__ import annotations

import socket
import statistics
import struct
import threading
import time
from dataclasses import dataclass, field

from mpiray.deadline import Deadline

KEY_BYTES = 16
WINDOW = 0.25  # seconds each receiver counts: a throttled link's figure settles well within it
PINGS = 5
CHUNK = 1 << 18
NAME_BYTES = 255  # the sender's host name, after the key: one length byte, then the name
STEP_TIMEOUT = 2.0  # a connect, a header, a ping answer, the first byte of a stream
ACCEPT_POLL = 0.1  # between looks at how many peers came
PING, STREAM = b"p", b"s"


@dataclass
class Figures:
    """What one host measured: per peer host, the bandwidth it received at (Mbit/s) and the round trip of its
    pings (ms), and what failed."""

    received: dict[str, float] = field(default_factory=dict)
    rtt_ms: dict[str, float] = field(default_factory=dict)
    errors: dict[str, str] = field(default_factory=dict)


class Listener:
    """A listening socket on this host's Ray address; serve() answers the peers' connections in threads."""

    def __init__(self, ip: str):
        family = socket.AF_INET6 if ":" in ip else socket.AF_INET
        self.sock = socket.socket(family, socket.SOCK_STREAM)
        try:
            self.sock.bind((ip, 0))
            self.sock.listen(64)
        except OSError:
            self.sock.close()
            raise
        port = self.sock.getsockname()[1]
        self.address = f"[{ip}]:{port}" if family == socket.AF_INET6 else f"{ip}:{port}"
        self.figures = Figures()
        self._lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._handlers: list[threading.Thread] = []
        self._keyed = 0  # connections that came with the job's key

    def serve(self, key: bytes, expected: int, deadline: Deadline) -> None:
        """Accept until `expected` connections came with the key (another's, without it, counts for nothing), or
        the deadline; each measured in a thread of its own."""

        def accept_all() -> None:
            while self._keyed < expected and not deadline.expired():
                self.sock.settimeout(max(0.01, min(ACCEPT_POLL, deadline.remaining())))
                try:
                    conn, _ = self.sock.accept()
                except socket.timeout:
                    continue
                except OSError:  # closed
                    return
                handler = threading.Thread(target=self._measure, args=(conn, key), daemon=True, name="link-receive")
                handler.start()
                self._handlers.append(handler)

        self._thread = threading.Thread(target=accept_all, daemon=True, name="link-accept")
        self._thread.start()

    def _measure(self, conn: socket.socket, key: bytes) -> None:
        with conn:
            try:
                conn.settimeout(STEP_TIMEOUT)
                if _read_exactly(conn, KEY_BYTES) != key:
                    return  # not a peer of this job
                with self._lock:
                    self._keyed += 1
                name = _read_exactly(conn, _read_exactly(conn, 1)[0]).decode(errors="replace")
                while (kind := _read_exactly(conn, 1)) == PING:
                    conn.sendall(PING)
                if kind != STREAM:
                    return
                mbit = _count_window(conn, WINDOW)
            except (OSError, ValueError, IndexError):
                return  # the sender names what failed, from its side
            with self._lock:
                self.figures.received[name] = mbit

    def busy(self) -> bool:
        """Still accepting, or measuring a connection."""
        return any(thread.is_alive() for thread in [*filter(None, [self._thread]), *self._handlers])

    def wait(self, deadline: Deadline) -> Figures:
        """What it measured, once every expected connection was measured or the deadline passed."""
        if self._thread is not None:
            self._thread.join(max(0.0, deadline.remaining()))
        for handler in list(self._handlers):
            handler.join(max(0.0, deadline.remaining()))
        with self._lock:
            return Figures(dict(self.figures.received))

    def close(self) -> None:
        self.sock.close()


def _read_exactly(conn: socket.socket, size: int) -> bytes:
    data = b""
    while len(data) < size:
        chunk = conn.recv(size - len(data))
        if not chunk:
            raise ValueError("the connection ended")
        data += chunk
    return data


def _count_window(conn: socket.socket, window: float) -> float:
    """Mbit/s received in the window seconds after the first byte (or until the sender stopped, if sooner)."""
    buffer = bytearray(CHUNK)
    first = conn.recv_into(buffer)
    if not first:
        raise ValueError("the stream was empty")
    started = time.monotonic()
    end, count = started + window, 0
    while (now := time.monotonic()) < end:
        conn.settimeout(end - now)
        try:
            got = conn.recv_into(buffer)
        except (socket.timeout, ConnectionResetError):
            break
        if not got:
            break
        count += got
    elapsed = max(time.monotonic() - started, 1e-6)
    return count * 8 / elapsed / 1e6


def send_to(address: str, key: bytes, name: str, window: float = WINDOW) -> tuple[float, str]:
    """Measure the link to a peer's listener: (the median round trip in ms, "") or (0, what failed). The stream
    lasts a little longer than the receiver's window, then the connection is reset (nothing lingers)."""
    host, _, port = address.rpartition(":")
    try:
        with socket.create_connection((host.strip("[]"), int(port)), timeout=STEP_TIMEOUT) as conn:
            encoded = name.encode()[:NAME_BYTES]
            conn.sendall(key + bytes([len(encoded)]) + encoded)
            trips = []
            for _ in range(PINGS):
                sent = time.monotonic()
                conn.sendall(PING)
                if _read_exactly(conn, 1) != PING:
                    return 0.0, "its answer to a ping was wrong"
                trips.append((time.monotonic() - sent) * 1000)
            conn.sendall(STREAM)
            payload = bytes(CHUNK)
            end = time.monotonic() + window * 1.2 + 0.1
            while (now := time.monotonic()) < end:
                conn.settimeout(end - now)
                try:
                    conn.send(payload)
                except (socket.timeout, ConnectionResetError, BrokenPipeError):
                    break
            conn.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # a reset at close
            return statistics.median(trips), ""
    except (OSError, ValueError) as error:
        return 0.0, f"{type(error).__name__}: {error}" if str(error) else type(error).__name__
