"""The helpers for real servers, on real processes and sockets on 127.0.0.1: a free port, a health probe, waiting
for a process to come up (or saying why it did not), and a stop that always ends the process."""

import http.server
import signal
import socket
import subprocess
import sys
import threading
import time

import pytest

from skewgate.common.errors import BackendError
from skewgate.common.processes import answers, free_port, stop, wait_until_up


def python(code):
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)


@pytest.fixture
def processes():
    """Start Python one-liners; whatever a test leaves running is killed (by its own handle) afterwards."""
    started = []

    def start(code):
        started.append(python(code))
        return started[-1]

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)
        process.stdout.close()


@pytest.fixture
def health():
    """An HTTP server on 127.0.0.1 answering GETs with the status in `status[0]`; its base URL."""
    status = [200]

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):  # the stdlib's name
            self.send_response(status[0])
            self.end_headers()
            self.wfile.write(b"ok")

        def log_message(self, *args):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    thread = threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}", status
    server.shutdown()
    server.server_close()


# --- free_port ---


def test_free_port_can_be_listened_on_at_once():
    port = free_port()
    assert 0 < port < 65536
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))  # nothing holds it, and the helper's own socket is closed
        sock.listen()


def test_free_port_is_not_a_port_something_listens_on():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        taken = busy.getsockname()[1]
        assert all(free_port() != taken for _ in range(20))


# --- answers ---


def test_answers_is_true_for_a_200(health):
    url, _ = health
    assert answers(f"{url}/-/healthy") is True


@pytest.mark.parametrize("status", [
    pytest.param(204, id="204-no-content"),
    pytest.param(404, id="404-not-found"),
    pytest.param(503, id="503-starting"),
])
def test_answers_is_false_for_any_other_status(health, status):
    url, current = health
    current[0] = status
    assert answers(f"{url}/-/healthy") is False


def test_answers_is_false_when_nothing_listens():
    assert answers(f"http://127.0.0.1:{free_port()}/-/healthy", timeout_s=1.0) is False


def test_answers_is_false_when_the_server_accepts_but_never_answers():
    with socket.socket() as silent:
        silent.bind(("127.0.0.1", 0))
        silent.listen()  # the kernel completes the handshake; nobody ever reads or writes
        started = time.monotonic()
        assert answers(f"http://127.0.0.1:{silent.getsockname()[1]}/", timeout_s=0.3) is False
        assert time.monotonic() - started < 3.0  # the timeout is honoured


# --- wait_until_up ---


def test_returns_at_once_when_already_up(processes, tmp_path):
    process = processes("import time; time.sleep(30)")
    started = time.monotonic()
    wait_until_up(process, lambda: True, what="server", log_path=tmp_path / "log", deadline_s=5)
    assert time.monotonic() - started < 0.2


def test_polls_until_up(processes, tmp_path):
    process = processes("import time; time.sleep(30)")
    calls = []

    def is_up():
        calls.append(time.monotonic())
        return len(calls) == 3

    wait_until_up(process, is_up, what="server", log_path=tmp_path / "log", deadline_s=10, poll_s=0.01)
    assert len(calls) == 3


def test_a_process_that_exits_first_is_named_with_its_exit_code_and_log(processes, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("starting\nerror: address already in use\n")
    process = processes("import sys; sys.exit(3)")
    process.wait(timeout=10)
    with pytest.raises(BackendError) as caught:
        wait_until_up(process, lambda: False, what="tritonserver", log_path=log, deadline_s=10, poll_s=0.01)
    assert str(caught.value) == "tritonserver exited with 3 at start: starting\nerror: address already in use\n"


def test_only_the_last_3000_characters_of_the_log_are_kept(processes, tmp_path):
    log = tmp_path / "server.log"
    log.write_text("H" * 5000 + "T" * 3000)
    process = processes("import sys; sys.exit(1)")
    process.wait(timeout=10)
    with pytest.raises(BackendError) as caught:
        wait_until_up(process, lambda: False, what="mlflow", log_path=log, deadline_s=10)
    assert str(caught.value) == "mlflow exited with 1 at start: " + "T" * 3000


def test_an_undecodable_log_is_still_shown(processes, tmp_path):
    log = tmp_path / "server.log"
    log.write_bytes(b"bad byte \xff here")
    process = processes("import sys; sys.exit(2)")
    process.wait(timeout=10)
    with pytest.raises(BackendError, match="mlflow exited with 2 at start: bad byte \ufffd here"):
        wait_until_up(process, lambda: False, what="mlflow", log_path=log, deadline_s=10)


def test_a_process_that_exits_without_a_log_says_so_with_an_empty_tail(processes, tmp_path):
    process = processes("import sys; sys.exit(4)")
    process.wait(timeout=10)
    with pytest.raises(BackendError) as caught:
        wait_until_up(process, lambda: False, what="server", log_path=tmp_path / "never.log", deadline_s=10)
    assert str(caught.value) == "server exited with 4 at start: "


def test_a_process_killed_by_a_signal_is_reported_with_the_negative_code(processes, tmp_path):
    process = processes("import time; time.sleep(30)")
    process.kill()
    process.wait(timeout=10)
    with pytest.raises(BackendError, match=f"server exited with {-signal.SIGKILL} at start"):
        wait_until_up(process, lambda: False, what="server", log_path=tmp_path / "log", deadline_s=10)


def test_a_process_that_never_comes_up_times_out_naming_its_log(processes, tmp_path):
    process = processes("import time; time.sleep(30)")
    log = tmp_path / "server.log"
    started = time.monotonic()
    with pytest.raises(BackendError) as caught:
        wait_until_up(process, lambda: False, what="prometheus", log_path=log, deadline_s=1.0, poll_s=0.05)
    elapsed = time.monotonic() - started
    assert str(caught.value) == f"prometheus not up after 1s; log: {log}"
    assert 1.0 <= elapsed < 5.0
    assert process.poll() is None  # waiting never stops the process: that is the caller's `stop`


# --- stop ---


def test_stop_ends_a_process_with_sigterm(processes):
    process = processes("import time; time.sleep(30)")
    started = time.monotonic()
    stop(process, grace_s=10)
    assert process.returncode == -signal.SIGTERM
    assert time.monotonic() - started < 5.0


def test_stop_kills_a_process_that_ignores_sigterm_after_the_grace_period(processes):
    process = processes("import signal, sys, time\n"
                        "signal.signal(signal.SIGTERM, signal.SIG_IGN)\n"
                        "print('ready', flush=True)\n"
                        "time.sleep(30)")
    assert process.stdout.readline() == b"ready\n"  # SIGTERM is ignored from here on
    started = time.monotonic()
    stop(process, grace_s=0.5)
    assert process.returncode == -signal.SIGKILL
    assert 0.5 <= time.monotonic() - started < 5.0


def test_stop_on_a_process_that_already_exited_does_nothing(processes):
    process = processes("import sys; sys.exit(0)")
    process.wait(timeout=10)
    stop(process, grace_s=1)
    assert process.returncode == 0
