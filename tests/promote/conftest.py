import pytest


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch):
    """Unit tests have no concurrent promotions: no wait before the alias read-back."""
    monkeypatch.setattr("skewgate.promote.core.SETTLE_S", 0.0)


@pytest.fixture
def onnx_file(tmp_path, tiny_onnx):
    """A valid ONNX file to promote, in the test's own folder."""
    path = tmp_path / "model.onnx"
    path.write_bytes(tiny_onnx.read_bytes())
    return path
