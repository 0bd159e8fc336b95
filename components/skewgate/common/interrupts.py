"""Interrupts of skewgate's own processes: SIGTERM raised the way Ctrl-C's SIGINT is, so that both end a command
with one line and the shell's exit codes (130, 143), and a block that interrupts wait for (a promotion between
moving an alias and logging it must not stop half done)."""

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
