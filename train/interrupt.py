"""SIGTERM/SIGINT during training: checkpoint every running trial, then stop Tune cleanly."""

from __future__ import annotations

import contextlib
import os
import signal
import sys
import threading
import time
from typing import Iterator, Optional

from ray.tune import Callback
from ray.tune.result import SHOULD_CHECKPOINT

HANDLED_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# Slurm (scancel, requeue, preemption) signals every process of the step, the driver too, and the
# launcher passes its own SIGTERM on to the driver: signals this close together are one stop.
SAME_STOP_S = 2.0


class StopRequest:
    """Process-wide record of a stop signal and of the trials saved since."""

    def __init__(self):
        self.signal_number: Optional[int] = None
        self._first_at = 0.0
        self.grace_s = 0.0
        self.saved_trial_ids: set[str] = set()
        self.checkpoint_paths: list[str] = []
        self._requested = threading.Event()
        self._interrupt_sent = threading.Event()
        self._timer: Optional[threading.Timer] = None

    @property
    def requested(self) -> bool:
        """True once a stop signal arrived."""
        return self._requested.is_set()

    def on_signal(self, signal_number, frame) -> None:
        """Signal handler: first signal asks for a checkpoint, a second one (later than
        SAME_STOP_S) stops at once."""
        if self.requested:
            if time.monotonic() - self._first_at < SAME_STOP_S:
                return  # the batch system's own SIGTERM and the launcher's copy of it: one stop
            _say("second stop signal: stopping without waiting for a checkpoint")
            self.interrupt_tune()
            return
        self.signal_number = signal_number
        self._first_at = time.monotonic()
        self._requested.set()
        _say(
            f"{signal.Signals(signal_number).name} received: saving a checkpoint at the end of "
            f"the current iteration (waiting up to {self.grace_s:g} s), then exiting; the same "
            "command (or a requeue of this job) continues from it"
        )
        self._timer = threading.Timer(self.grace_s, self.interrupt_tune)
        self._timer.daemon = True
        self._timer.start()

    def interrupt_tune(self) -> None:
        """End Tuner.fit() through Tune's own SIGUSR1 path, which writes the experiment state."""
        # Outside Tuner.fit() SIGUSR1 has its default action, which would kill us.
        if self._interrupt_sent.is_set() or signal.getsignal(signal.SIGUSR1) in (signal.SIG_DFL, None):
            return
        self._interrupt_sent.set()
        os.kill(os.getpid(), signal.SIGUSR1)

    def cancel_timer(self) -> None:
        """Stop the grace timer (fit() has returned)."""
        if self._timer is not None:
            self._timer.cancel()


# Signals are per process, and Tune pickles callbacks into tuner.pkl and back on
# --resume, so the callback keeps no state of its own and reads this one.
STOP_REQUEST = StopRequest()


class CheckpointOnSignal(Callback):
    """Tune callback: after a stop signal, save each running trial at its next result, then stop.

    If the checkpoint does not arrive within the grace period (a long
    iteration), Tune is stopped anyway and --resume uses the last periodic
    checkpoint.
    """

    def on_trial_result(self, iteration, trials, trial, result, **info):
        if STOP_REQUEST.requested and trial.trial_id not in STOP_REQUEST.saved_trial_ids:
            result[SHOULD_CHECKPOINT] = True

    def on_checkpoint(self, iteration, trials, trial, checkpoint, **info):
        if not STOP_REQUEST.requested:
            return
        STOP_REQUEST.saved_trial_ids.add(trial.trial_id)
        STOP_REQUEST.checkpoint_paths.append(checkpoint.path)
        _say(f"checkpoint saved after the stop signal: {checkpoint.path}")
        running = {t.trial_id for t in trials if t.status == t.RUNNING}
        if running <= STOP_REQUEST.saved_trial_ids:
            STOP_REQUEST.interrupt_tune()


@contextlib.contextmanager
def checkpoint_on_signal(grace_s: float) -> Iterator[StopRequest]:
    """Route SIGTERM/SIGINT to STOP_REQUEST while the block (Tuner.fit) runs."""
    # Tune would replace our SIGINT handler with one that stops without a checkpoint.
    os.environ["TUNE_DISABLE_SIGINT_HANDLER"] = "1"
    STOP_REQUEST.grace_s = grace_s
    previous = {number: signal.signal(number, STOP_REQUEST.on_signal) for number in HANDLED_SIGNALS}
    try:
        yield STOP_REQUEST
    finally:
        STOP_REQUEST.cancel_timer()
        for number, handler in previous.items():
            signal.signal(number, handler)


def _say(message: str) -> None:
    print(f"[train] {message}", file=sys.stderr, flush=True)
