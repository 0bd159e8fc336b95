"""The zoo (tests/zoo.py) through layerwise parity: every faithful export passes, with every ONNX value accounted
for; defects planted inside attention are localised to the attention module."""

import numpy as np
import onnx
import pytest

from skewgate.common.error_stats import RunningError
from skewgate.common.layers import onnx_values
from skewgate.common.rounding import FACTOR
from skewgate.parity.core import LAYER_TOLERANCE, ParityOptions, _layer_report, parity
from tests.parity.models import plant_in_attention, quantize
from tests.zoo import ZOO

LAYERWISE = ParityOptions(layerwise=True, batch_size=32, max_samples=64)


def _run(files, onnx_path):
    return parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, options=LAYERWISE)


@pytest.mark.parametrize("name", list(ZOO))
def test_faithful_export_passes_with_every_value_accounted_for(zoo, name):
    files, onnx_path = zoo(name)
    result = _run(files, onnx_path)
    assert result.verdict.status == "pass", result.verdict.message
    coverage = result.verdict.details["torch_vs_fp32"]["coverage"]
    assert coverage["matched"] >= 3
    model = onnx.load(str(onnx_path))
    finals = {o.name for o in model.graph.output}
    every = {o for n in model.graph.node for o in n.output if o} - finals
    matched = {row["value"] for row in result.layers["torch_vs_fp32"]}
    assert matched | set(coverage["unmatched_onnx_values"]) == every
    assert not matched & set(coverage["unmatched_onnx_values"])
    assert all(why.split(":")[0] for why in coverage["unmatched_onnx_values"].values())
    assert coverage["shape_mismatches"] == {}


def test_transformer_values_pair_by_provenance_not_by_name(zoo):
    """The exporter lowers `unflatten` as an extra `view`, so from there on its `view_N` is the program's
    `view_{N-1}`: same names pair wrongly (the false alarm this replaced)."""
    files, onnx_path = zoo("transformer")
    rows = {row["value"]: row for row in _run(files, onnx_path).layers["torch_vs_fp32"]}
    assert (rows["view"]["torch_node"], rows["view"]["matched_by"]) == ("unflatten", "same consumer")
    assert rows["view_1"]["torch_node"] == "view"
    assert rows["scaled_dot_product_attention"]["torch_node"] == "scaled_dot_product_attention"
    assert all(row["max_abs"] < 1e-4 for row in rows.values())


@pytest.mark.parametrize(("name", "renamed", "node"), [
    pytest.param("channels_last", "getitem", "batch_norm", id="batchnorm-folded-into-conv"),
    pytest.param("softmax_head", "view", "flatten", id="flatten-as-reshape"),
])
def test_a_renamed_value_is_judged_with_its_program_nodes_grounded_tolerance(zoo, tmp_path, name, renamed, node):
    """A value the exporter renamed (BatchNorm folded into the Conv before it, `flatten` lowered as `Reshape`)
    pairs by its consumer, and is judged with the rounding measured on *its program node*: not with the floor,
    which its ONNX name would get. Raw 0-255 pixels put that rounding above the floor."""
    files, onnx_path = zoo(name)
    arrays = dict(np.load(files.inputs))
    pixels = tmp_path / "pixels.npz"
    np.savez(pixels, **{k: v if k == "labels" else v * 255 for k, v in arrays.items()})
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=pixels, options=LAYERWISE)
    assert result.verdict.status == "pass", result.verdict.message
    row = {r["value"]: r for r in result.layers["torch_vs_fp32"]}[renamed]
    assert (row["torch_node"], row["matched_by"]) == (node, "same consumer")
    rounding = result.verdict.details["rounding"]["layers"]["max_fp32_error"][node]
    assert row["atol"] == pytest.approx((FACTOR + 1) * rounding, rel=1e-2) and row["atol"] > 2 * LAYER_TOLERANCE.atol
    assert row["rtol"] == LAYER_TOLERANCE.rtol


@pytest.mark.parametrize("defect", ["softmax_axis", "scale"])
@pytest.mark.parametrize("module", ["encoder.layers.0.self_attn", "encoder.layers.1.self_attn"])
def test_defect_inside_attention_is_localised_to_its_module(zoo, tmp_path, defect, module):
    files, onnx_path = zoo("transformer")
    result = _run(files, plant_in_attention(onnx_path, tmp_path / "planted.onnx", module, defect))
    assert result.verdict.status == "fail"
    first = result.verdict.details["torch_vs_fp32"]["first_divergence"]
    assert (first["module"], first["value"]) == (module, "scaled_dot_product_attention" + "_1" * module.count("1"))
    assert "introduced here" in first["isolated"], first["isolated"]
    assert module in result.verdict.check("layers.torch_vs_fp32").detail


def test_isolated_rerun_of_an_op_that_reads_the_graph_input(zoo, tmp_path):
    """The input projection reads `x` itself: the re-run feeds it the same few samples of the graph input."""
    files, onnx_path = zoo("transformer")
    result = _run(files, plant_in_attention(onnx_path, tmp_path / "bias.onnx", "proj", "bias"))
    first = result.verdict.details["torch_vs_fp32"]["first_divergence"]
    assert (first["module"], first["value"]) == ("proj", "linear")
    assert "introduced here" in first["isolated"], first["isolated"]


def test_shape_mismatch_is_reported_not_dropped(zoo):
    _, onnx_path = zoo("transformer")
    model = onnx.load(str(onnx_path))
    rng = np.random.default_rng(0)
    fine, odd = RunningError(LAYER_TOLERANCE), RunningError(LAYER_TOLERANCE)
    fine.update(np.ones((2, 3)), np.ones((2, 3)), rng)
    odd.update(np.ones((3, 2)), np.ones((2, 3)), rng)
    rows, checks, info = _layer_report("torch_vs_fp32", {"linear": fine, "transpose": odd}, onnx_values(model),
                                       [o.name for o in model.graph.output], lambda e: not e.ok, None, None, {})
    assert info["coverage"]["shape_mismatches"] == {"transpose": "shape (3, 2) vs (2, 3)"}
    assert [row["value"] for row in rows if row["diverged"]] == ["transpose"]
    assert info["first_divergence"]["value"] == "transpose"
    assert "shape (3, 2) vs (2, 3)" in checks[-1].detail


@pytest.mark.parametrize("name", list(ZOO))
def test_int8_parity_runs_layer_by_layer_on_every_architecture(zoo, tmp_path, name):
    """ORT's own QDQ quantiser on each zoo model: the FP32 pair still passes, the INT8 pair is judged on every
    output and matched across the Q/DQ nodes (whether INT8 passes is calibrate's business, not this test's)."""
    files, onnx_path = zoo(name)
    int8 = quantize(onnx_path, tmp_path / "model.int8.onnx", files.inputs)
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, int8=int8, options=LAYERWISE)
    checks = {c.name: c for c in result.verdict.checks}
    assert all(c.passed for n, c in checks.items() if n.startswith(("outputs_match", "layers.torch_vs_fp32")))
    outputs = [o.name for o in onnx.load(str(onnx_path)).graph.output]
    assert {f"int8.sqnr_db.{o}" for o in outputs} <= set(checks)
    assert result.verdict.details["fp32_vs_int8"]["coverage"]["matched"] >= 1
    assert all(np.isfinite(row["max_abs"]) for row in result.layers["fp32_vs_int8"])
