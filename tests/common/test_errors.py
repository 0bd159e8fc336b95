"""`map_errors` and `check_read_back`: what a backend's failure is called, once, at the boundary."""

import pytest

from skewgate.common.errors import (
    BackendError,
    Inconsistent,
    InputError,
    Rejected,
    Unreachable,
    check_read_back,
    map_errors,
)


class ClientError(Exception):
    """Stands in for a client library's own exception (MlflowException, kfp_server_api's ApiException)."""

    def __init__(self, message, *, error_code=None, status=None):
        super().__init__(message)
        self.error_code, self.status = error_code, status


class MaxRetryError(Exception):
    """urllib3's name: judged by type name, so that errors.py imports no client library."""


def _wrapped():
    try:
        raise ConnectionRefusedError(111, "Connection refused")
    except OSError:
        raise ClientError("API request to http://m/api failed with exception ...")  # noqa: B904 (as MLflow does)


def _raise(err):
    raise err


@pytest.mark.parametrize(("fail", "kind", "code"), [
    (lambda: _raise(ConnectionRefusedError(111, "Connection refused")), Unreachable, None),
    (lambda: _raise(TimeoutError("timed out")), Unreachable, None),
    (lambda: _raise(MaxRetryError("Max retries exceeded")), Unreachable, None),
    (_wrapped, Unreachable, None),
    (lambda: _raise(ClientError("exists", error_code="RESOURCE_ALREADY_EXISTS")), Rejected,
     "RESOURCE_ALREADY_EXISTS"),
    (lambda: _raise(ClientError("Forbidden", status=403)), Rejected, "403"),
    (lambda: _raise(ValueError("bad answer")), Rejected, None),
], ids=["connection-refused", "timeout", "urllib3-by-name", "wrapped-by-the-client", "mlflow-error-code",
        "http-status", "anything-else"])
def test_a_backend_failure_is_unreachable_or_rejected_naming_backend_and_operation(fail, kind, code):
    with pytest.raises(kind) as caught, map_errors("MLflow at http://m:5000", "create the export run"):
        fail()
    assert str(caught.value).startswith("MLflow at http://m:5000: create the export run failed: ")
    assert caught.value.__cause__ is not None  # the library's own error stays attached
    if kind is Rejected:
        assert caught.value.code == code


@pytest.mark.parametrize("err", [
    InputError("verdict.json", expected="a verdict", found="garbage"),
    Inconsistent("tags did not read back"),
    TypeError("a bug"),
], ids=["skewgate-input-error", "skewgate-backend-error", "type-error-is-a-bug"])
def test_skewgates_own_errors_and_bugs_pass_through_unchanged(err):
    with pytest.raises(type(err)) as caught, map_errors("MLflow at x", "read"):
        raise err
    assert caught.value is err


def test_read_back_names_every_key_that_did_not_land():
    written = {"skewgate.export.status": "pass", "skewgate.parity.status": "pass", "skewgate.attestation.uri": "a"}
    read = {"skewgate.export.status": "pass", "skewgate.parity.status": "fail", "skewgate.attestation.uri": "b"}
    with pytest.raises(Inconsistent, match=r"tags of m v1 did not read back: \['skewgate.attestation.uri', "
                                           r"'skewgate.parity.status'\]") as caught:
        check_read_back("tags of m v1", written, read)
    assert isinstance(caught.value, BackendError)  # still exit 2, "could not evaluate"


def test_read_back_accepts_a_concurrent_writers_value_where_allowed():
    written = {"skewgate.attestation.uri": "mine", "skewgate.export.status": "pass"}
    check_read_back("tags", written, {"skewgate.attestation.uri": "theirs", "skewgate.export.status": "pass"},
                    present_only={"skewgate.attestation.uri"})
    with pytest.raises(Inconsistent, match=r"attestation\.uri"):
        check_read_back("tags", written, {"skewgate.export.status": "pass"}, present_only={"skewgate.attestation.uri"})
