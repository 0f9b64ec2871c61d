"""The driver's output, copied line by line to the job's stdout/stderr and to LOG_DIR/JOB_ID/driver.log."""

from __future__ import annotations

import queue
import threading
from pathlib import Path
from typing import IO, BinaryIO

from mpiray.logs.files import open_append


class Tee:
    """Copies a child's stdout and stderr to ours and to a log file, line by line.

    The child must never wait on the log: a log write that fails (disk quota) or stalls (a hung
    filesystem) only costs the log its lines. A writer thread takes them from a bounded queue;
    when it is full, lines are dropped from the log (and counted), never from the terminal.
    """

    QUEUE_LINES = 10_000

    def __init__(self, log: BinaryIO | None, name: str, error: str | None = None):
        self.name = name
        self.dropped = 0
        self.error = error
        self._log = log
        self._lines: queue.Queue[bytes | None] = queue.Queue(self.QUEUE_LINES)
        self._pumps: list[threading.Thread] = []
        self._writer = threading.Thread(target=self._write, name="tee-log", daemon=True)
        self._writer.start()

    @classmethod
    def to_file(cls, path: Path) -> Tee:
        try:
            return cls(open_append(path), str(path))
        except OSError as error:
            return cls(None, str(path), f"cannot open {path}: {error}")

    def pump(self, pipe: IO[bytes], target: IO[bytes]) -> None:
        thread = threading.Thread(target=self._pump, args=(pipe, target), name="tee-pump", daemon=True)
        thread.start()
        self._pumps.append(thread)

    def _pump(self, pipe: IO[bytes], target: IO[bytes]) -> None:
        for line in iter(pipe.readline, b""):
            try:
                self._lines.put_nowait(line)
            except queue.Full:
                self.dropped += 1
            try:
                target.write(line)
                target.flush()
            except OSError:
                pass  # our own stdout is gone (a closed terminal): keep draining the child's pipe
        pipe.close()

    def _write(self) -> None:
        while (line := self._lines.get()) is not None:
            if self._log is None:
                continue
            try:
                self._log.write(line)
            except OSError as error:
                self.error = f"writing {self.name} failed: {error}"
                self._log.close()
                self._log = None

    def close(self, timeout: float) -> None:
        """After the child ended: let the pumps finish, then the writer (each at most timeout s)."""
        for thread in self._pumps:
            thread.join(timeout)
        try:
            self._lines.put(None, timeout=timeout)
        except queue.Full:
            return
        self._writer.join(timeout)
        if self._log is not None and not self._writer.is_alive():
            self._log.close()
