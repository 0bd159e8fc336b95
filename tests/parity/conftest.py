import pytest

from tests.parity.models import build
from tests.zoo import export, save


@pytest.fixture(scope="session")
def parity_model(tmp_path_factory):
    return build(tmp_path_factory.mktemp("parity"))


@pytest.fixture(scope="session")
def zoo(tmp_path_factory):
    """zoo("transformer") → (ZooFiles, exported .onnx), built once per session."""
    directory = tmp_path_factory.mktemp("zoo")
    cache = {}

    def get(name):
        if name not in cache:
            files = save(name, directory)
            cache[name] = (files, export(files))
        return cache[name]

    return get
