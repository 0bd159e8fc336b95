"""The Triton client's boundary (no server needed): a server that cannot be reached is `Unreachable` once the
deadline has passed, on both protocols; tritonclient's own exceptions never reach the caller."""

import time

import pytest

from skewgate.common.errors import Unreachable
from skewgate.common.processes import free_port
from skewgate.common.triton.client import TritonClient


@pytest.mark.parametrize("protocol", ["http", "grpc"])
def test_a_server_that_is_down_is_unreachable_after_the_deadline(protocol):
    client = TritonClient(f"127.0.0.1:{free_port()}", protocol, deadline_s=1)
    started = time.monotonic()
    with pytest.raises(Unreachable, match=r"\(" + protocol + r"\): live failed for 1s"):
        client.is_server_live()
    elapsed = time.monotonic() - started
    client.close()
    assert 0.5 < elapsed < 5  # retried until the deadline, not forever


def test_a_connection_is_retried_until_the_server_answers():
    calls = []

    def flaky(*, headers):
        calls.append(headers)
        if len(calls) < 3:
            raise ConnectionRefusedError(111, "Connection refused")
        return True

    client = TritonClient("127.0.0.1:1", headers={"Authorization": "Bearer t"}, deadline_s=5)
    assert client.call("live", flaky) is True
    assert calls == [{"Authorization": "Bearer t"}] * 3
    client.close()
