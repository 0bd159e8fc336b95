import pytest
from onnx import TensorProto

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.triton.repository import onnx_signature, write_repository
from tests.probe.conftest import make_mlp


def test_python_backend_repository_layout(tmp_path):
    onnx_path = make_mlp(tmp_path / "m.onnx")
    written = write_repository(onnx_path, tmp_path / "repo", name="mlp", version=3, max_batch_size=8)
    assert written.onnx == tmp_path / "repo" / "mlp" / "3" / "model.onnx"
    assert written.sha256 == sha256_file(onnx_path)
    assert (written.onnx.parent / "model.onnx.sha256").read_text().startswith(written.sha256)
    assert (written.onnx.parent / "model.py").is_file()
    config = (written.directory / "config.pbtxt").read_text()
    assert 'backend: "python"' in config
    assert "max_batch_size: 8" in config
    assert '{ name: "x" data_type: TYPE_FP32 dims: [ 4 ] }' in config  # no batch dimension
    assert "dynamic_batching" in config


def test_onnxruntime_platform_for_clusters_with_gpu_instances(tmp_path):
    onnx_path = make_mlp(tmp_path / "m.onnx", elem=TensorProto.DOUBLE)
    written = write_repository(onnx_path, tmp_path / "repo", name="mlp", platform="onnxruntime_onnx",
                               instance_kind="GPU", instance_count=2)
    config = (written.directory / "config.pbtxt").read_text()
    assert 'platform: "onnxruntime_onnx"' in config and "TYPE_FP64" in config
    assert "instance_group [ { kind: KIND_GPU count: 2 } ]" in config
    assert not (written.onnx.parent / "model.py").exists()


def test_static_batch_needs_max_batch_size_zero(tmp_path):
    onnx_path = make_mlp(tmp_path / "m.onnx", batch=5)
    assert not onnx_signature(onnx_path).batched
    with pytest.raises(InputError, match="max_batch_size: expected 0"):
        write_repository(onnx_path, tmp_path / "repo", name="mlp")
    written = write_repository(onnx_path, tmp_path / "repo", name="mlp", max_batch_size=0)
    config = (written.directory / "config.pbtxt").read_text()
    assert "dims: [ 5, 4 ]" in config and "dynamic_batching" not in config
