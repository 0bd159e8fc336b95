import pytest

from tests.parity.models import build


@pytest.fixture(scope="session")
def parity_model(tmp_path_factory):
    return build(tmp_path_factory.mktemp("parity"))
