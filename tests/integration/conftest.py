import pytest

from tests.support.mlflow_server import mlflow_server
from tests.support.warm_kfp import warm_kfp_tasks


@pytest.fixture(scope="session")
def mlflow_url(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as url:
        yield url


@pytest.fixture(scope="session", autouse=True)
def warm_kfp():
    """kfp.local's tasks forked from one warm process (tests/support/warm_kfp.py), started on the first task."""
    with pytest.MonkeyPatch.context() as patch, warm_kfp_tasks(patch) as executor:
        yield executor


def signing_keys(folder):
    """A key pair for a pipeline run: the steps sign with the private key (kfp.local hands
    `$SKEWGATE_SIGNING_KEY` to every step), promote trusts the returned public key (PEM text)."""
    import os

    from skewgate.common import attest

    key, public = attest.generate_keys(folder)
    os.environ[attest.SIGNING_KEY_ENV] = str(key)
    return public.read_text(encoding="utf-8")
