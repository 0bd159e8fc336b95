"""Interrupts of skewgate's own processes: SIGTERM raised the way Ctrl-C's SIGINT is, so that both end a command
with one line and the shell's exit codes (130, 143); a block that interrupts wait for (a promotion between moving
an alias and logging it must not stop half done); and a block that a deadline interrupts (SIGALRM)."""

from __future__ import annotations

import contextlib
import signal
import sys
import threading
import types
from collections.abc import Iterator


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised as Ctrl-C is (`raise_on_sigterm`): `finally` blocks and context managers run."""


def raise_on_sigterm() -> None:
    """From now on SIGTERM raises `Terminated` in the main thread (Python's default ends the process at once)."""
    signal.signal(signal.SIGTERM, _raise_terminated)


def _raise_terminated(signum: int, frame: types.FrameType | None) -> None:
    raise Terminated()


@contextlib.contextmanager
def deferred_interrupts(what: str) -> Iterator[None]:
    """SIGINT and SIGTERM wait until the block has ended, then raise as they would have (`KeyboardInterrupt`,
    `Terminated`), after one line on stderr saying what is being finished. Signals are handled in the main thread
    only; elsewhere the block runs as it is."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []

    def hold(signum: int, frame: types.FrameType | None) -> None:
        if not received:
            print(f"skewgate: {signal.Signals(signum).name} received; finishing {what} first", file=sys.stderr)
        received.append(signum)

    previous = {number: signal.signal(number, hold) for number in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
    if received:
        raise Terminated() if received[0] == signal.SIGTERM else KeyboardInterrupt()


class DeadlineExceeded(BaseException):
    """An `overall_deadline` passed. A BaseException, as KeyboardInterrupt is: retry loops and libraries that
    catch `Exception` (a failed request is retried) must not swallow it; the caller that set the deadline catches
    it and says what did not finish."""


@contextlib.contextmanager
def overall_deadline(seconds: float, what: str) -> Iterator[None]:
    """The block ends within `seconds` of wall time or raises `DeadlineExceeded` naming `what`: a server that
    answers one byte at a time defeats every per-read timeout, never this one (SIGALRM interrupts the blocked
    read, and again every second until the block has ended). Main thread only, and not nested in another;
    elsewhere, or with `seconds` ≤ 0, the block runs as it is."""
    if seconds <= 0 or threading.current_thread() is not threading.main_thread() or \
            signal.getitimer(signal.ITIMER_REAL)[0] > 0:
        yield
        return

    def expired(signum: int, frame: types.FrameType | None) -> None:
        raise DeadlineExceeded(f"{what}: not done within the overall deadline of {seconds:g} s (--mlflow-deadline)")

    previous = signal.signal(signal.SIGALRM, expired)
    signal.setitimer(signal.ITIMER_REAL, seconds, 1.0)
    try:
        yield
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)
