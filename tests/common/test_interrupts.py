"""Interrupts: Ctrl-C and SIGTERM end any command with one line and exit 130/143, never a traceback; a promotion
that has started finishes what it writes (its log records it) before it stops."""

import os
import signal
import subprocess
import sys
import time

import pytest

from skewgate.common.interrupts import (
    DeadlineExceeded,
    Terminated,
    deferred_interrupts,
    overall_deadline,
    raise_on_sigterm,
)
from tests.verify.test_registry import _SilentServer


@pytest.mark.parametrize(("number", "raised"), [(signal.SIGINT, KeyboardInterrupt), (signal.SIGTERM, Terminated)],
                         ids=["SIGINT", "SIGTERM"])
def test_a_deferred_interrupt_lets_the_block_finish_then_raises(number, raised, capsys):
    previous = signal.getsignal(signal.SIGTERM), signal.getsignal(signal.SIGINT)
    # Python's own Ctrl-C handler, as an interactive shell starts it (a job started in the background of a
    # script inherits SIGINT ignored, and Python then keeps it ignored)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    raise_on_sigterm()
    try:
        finished = []
        with pytest.raises(raised), deferred_interrupts("the work"):
            os.kill(os.getpid(), number)
            time.sleep(0.05)  # the handler has run by now: nothing was raised inside
            finished.append(True)
        assert finished == [True]
        assert f"{signal.Signals(number).name} received; finishing the work first" in capsys.readouterr().err
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # as they were before the block
        with pytest.raises(raised):  # and an interrupt outside a block raises at once
            os.kill(os.getpid(), number)
            time.sleep(0.05)
    finally:
        signal.signal(signal.SIGTERM, previous[0])
        signal.signal(signal.SIGINT, previous[1])


def test_a_block_without_an_interrupt_raises_nothing():
    with deferred_interrupts("nothing"):
        pass


@pytest.fixture
def silent():
    server = _SilentServer()
    yield server
    server.close()


def _interrupted(argv, number, *, server):
    """Run `skewgate ARGV`, send NUMBER once it has connected to SERVER (past its imports, however busy the machine
    is), and return its exit code, stderr and the seconds from the signal to its exit."""
    # SIGINT at its default in the child, as a terminal starts a command: a background job of a script (how CI may
    # run the suite) inherits it ignored, and Python then never installs its Ctrl-C handler
    process = subprocess.Popen([sys.executable, "-m", "skewgate", *argv], stdout=subprocess.PIPE,
                               stderr=subprocess.PIPE, text=True,
                               preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    waited_until = time.monotonic() + 120
    while not server.connections and process.poll() is None and time.monotonic() < waited_until:
        time.sleep(0.05)
    assert server.connections, f"the command never connected to the server (exit {process.poll()})"
    started = time.monotonic()
    process.send_signal(number)
    _out, err = process.communicate(timeout=60)
    return process.returncode, err, time.monotonic() - started


@pytest.mark.parametrize(("number", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)],
                         ids=["SIGINT", "SIGTERM"])
def test_an_interrupted_command_ends_with_one_line_and_the_shells_exit_code(silent, keys, number, code):
    """verify, waiting on a server that never answers (deadline 60 s), stops at once."""
    returncode, err, took = _interrupted(["verify", "--model-name", "m", "--tracking-uri", silent.url, "--trusted-key",
                                          str(keys[1]), "--mlflow-deadline", "60"], number, server=silent)
    assert returncode == code, err
    name = signal.Signals(number).name
    assert "Traceback" not in err and err.strip().splitlines()[-1] == f"skewgate verify: interrupted ({name})"
    assert took < 30


def test_an_interrupted_promotion_finishes_what_it_started_then_exits_130(silent, tmp_path, tiny_onnx):
    """promote, connecting to a server that never answers (deadline 8 s): Ctrl-C waits for the step to end as it
    would have (could not evaluate; its report written), then the command exits 130 in one line."""
    (tmp_path / "verdicts").mkdir()
    report = tmp_path / "promote.json"
    returncode, err, _took = _interrupted(["promote", "--model-name", "m", "--onnx", str(tiny_onnx), "--verdicts",
                                          str(tmp_path / "verdicts"), "--tracking-uri", silent.url, "--require",
                                          "export", "--allow-unsigned", "--mlflow-deadline", "8", "--report",
                                          str(report)], signal.SIGINT, server=silent)
    assert returncode == 130, err
    assert "Traceback" not in err and err.strip().splitlines()[-1] == "skewgate promote: interrupted (SIGINT)"
    assert "SIGINT received; finishing the promotion" in err
    assert report.is_file()  # the step ended as its verdict says, then the interrupt was honoured


def test_an_overall_deadline_interrupts_a_block_that_outlives_it_and_no_other():
    started = time.monotonic()
    with pytest.raises(DeadlineExceeded, match=r"the nap: not done within the overall deadline of 0\.3 s"), \
            overall_deadline(0.3, "the nap"):
        try:
            time.sleep(5)
        except Exception:  # a retry loop swallowing failures: the deadline is no Exception, it goes through
            time.sleep(5)
    assert time.monotonic() - started < 2
    with overall_deadline(0.3, "a short task"):
        time.sleep(0.1)
    time.sleep(0.4)  # cancelled with its block: nothing fires later
    assert signal.getitimer(signal.ITIMER_REAL) == (0.0, 0.0)
