import pytest

from tests.support.mlflow_server import mlflow_server


@pytest.fixture(scope="session")
def mlflow_url(tmp_path_factory):
    with mlflow_server(tmp_path_factory.mktemp("mlflow-server")) as url:
        yield url
