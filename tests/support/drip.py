"""A tracking "server" that holds a client with a body sent one byte a second: no single read waits long enough
for a per-read timeout, so only an overall deadline ends the call (#32 item 7)."""

from __future__ import annotations

import json
import socket
import threading
import time

from skewgate.common.mlflow_conventions import EXPERIMENT_KIND, EXPERIMENT_KIND_TAG

# MLflow's answer to the experiment lookup every step makes first: with it, the step gets past `connect` and the
# next call (creating its run) is the one that drips
EXPERIMENT_LOOKUP = "/api/2.0/mlflow/experiments/get-by-name"


class DripServer:
    """A socket on 127.0.0.1 that answers every request `200 OK` with a long body, one byte a second, except the
    experiment lookup when `experiment` names one (answered at once, as MLflow would)."""

    def __init__(self, *, experiment: str | None = None):
        self.experiment = experiment
        self.socket = socket.socket()
        self.socket.bind(("127.0.0.1", 0))
        self.socket.listen(16)
        self.port = self.socket.getsockname()[1]
        self.url = f"http://127.0.0.1:{self.port}"
        # time.monotonic() of the first request that drips: the command is past its imports by then
        self.first_request: float | None = None
        self.stop = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self):
        while not self.stop.is_set():
            try:
                connection, _ = self.socket.accept()
            except OSError:
                return
            threading.Thread(target=self._serve, args=(connection,), daemon=True).start()

    def _serve(self, connection):
        with connection:
            try:
                while not self.stop.is_set():
                    request = connection.recv(65536)
                    if not request:
                        return
                    if self.experiment and EXPERIMENT_LOOKUP.encode() in request.split(b"\r\n", 1)[0]:
                        body = json.dumps({"experiment": {
                            "experiment_id": "1", "name": self.experiment, "lifecycle_stage": "active",
                            "artifact_location": "mlflow-artifacts:/1",
                            "tags": [{"key": EXPERIMENT_KIND_TAG, "value": EXPERIMENT_KIND}]}}).encode()
                        connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                           b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n" + body)
                        continue
                    if self.first_request is None:
                        self.first_request = time.monotonic()
                    connection.sendall(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                                       b"Content-Length: 100000\r\n\r\n")
                    while not self.stop.wait(1.0):
                        connection.sendall(b" ")
                    return
            except OSError:
                return

    def close(self):
        self.stop.set()
        self.socket.close()
