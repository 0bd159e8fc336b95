import numpy as np
import pytest
from onnx import TensorProto

from skewgate.common.errors import InputError
from skewgate.common.io import sha256_file
from skewgate.common.triton.repository import from_served, onnx_signature, to_served, write_repository
from tests.probe.conftest import make_id_model, make_mlp


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


def test_an_id_per_sample_is_served_as_batch_by_one(tmp_path):
    """Triton refuses empty per-sample dims; its documented form for a [batch] tensor is dims [1] reshaped."""
    written = write_repository(make_id_model(tmp_path / "ids.onnx"), tmp_path / "repo", name="ids")
    config = (written.directory / "config.pbtxt").read_text()
    assert '{ name: "ids" data_type: TYPE_INT64 dims: [ 1 ] reshape: { shape: [ ] } }' in config
    assert '{ name: "score" data_type: TYPE_FP32 dims: [ 1 ] reshape: { shape: [ ] } }' in config
    assert '{ name: "y" data_type: TYPE_FP32 dims: [ 3 ] }' in config  # the others as they were


# the config as Triton's JSON returns it: an empty repeated field is dropped (`"reshape": {}`)
ID_CONFIG = {"max_batch_size": 8, "input": [{"name": "ids", "dims": [1], "reshape": {}}],
             "output": [{"name": "y", "dims": [3]}, {"name": "score", "dims": [1], "reshape": {"shape": []}}]}


def test_clients_send_and_read_the_served_shapes():
    ids = np.arange(5, dtype=np.int64)
    assert to_served({"ids": ids}, ID_CONFIG)["ids"].shape == (5, 1)
    back = from_served({"y": np.zeros((5, 3), np.float32), "score": np.arange(5.0).reshape(5, 1)}, ID_CONFIG)
    assert back["y"].shape == (5, 3)
    np.testing.assert_array_equal(back["score"], np.arange(5.0))
    unbatched = {**ID_CONFIG, "max_batch_size": 0,
                 "input": [{"name": "ids", "dims": [5, 1], "reshape": {"shape": [5]}}]}
    assert to_served({"ids": ids}, unbatched)["ids"].shape == (5, 1)
    assert to_served({"x": ids}, ID_CONFIG)["x"] is ids  # not in the config's reshapes: as given


def test_a_served_output_of_another_size_is_left_for_the_comparison_to_report():
    """A server answering [batch, 2] for an output the config says is [batch, 1]: not reshaped, not a crash;
    the shape mismatch then fails `outputs_match`."""
    odd = np.zeros((5, 2), np.float32)
    assert from_served({"score": odd}, ID_CONFIG)["score"] is odd
