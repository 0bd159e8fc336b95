"""Stream mode: STEP run step by step with its state fed back against FULL on whole sequences, with planted
defects (a STEP starting from zeros where FULL learned its initial state; a STEP ignoring its state)."""

import json
import re

import numpy as np
import pytest

from skewgate.cli import main
from skewgate.common.errors import InputError
from skewgate.parity.core import ParityOptions, parity
from tests.parity.stream_models import STEPS, build


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    return build(tmp_path_factory.mktemp("stream"))


def _judge(gru, step, **options):
    result = parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
                    options=ParityOptions(stream_onnx=gru[step], states={"h": "h_next"}, **options))
    return result.verdict, {c.name: c for c in result.verdict.checks}


def test_faithful_step_with_learned_initial_state_passes(gru):
    verdict, checks = _judge(gru, "step", initial_state=gru["h0"])
    assert verdict.status == "pass", verdict.message
    assert {"stream.matches_batch", "stream.state_used", "stream.reset"} <= set(checks)
    stream = verdict.details["stream"]
    assert stream["steps"] == STEPS
    assert stream["outputs"]["logits"]["compared"] == "per step (axis 1)"
    assert stream["first_divergence"] is None
    # the reset matters: the second sequence from the first's final state would differ beyond tolerance
    contamination = stream["reset"]["contamination_without_reset"]["logits"]
    assert contamination["steps_beyond_tolerance"] >= 1 and contamination["max_abs"] > 1e-3
    assert "without the reset" in checks["stream.reset"].detail
    assert {"stream_onnx", "initial_state"} <= set(verdict.subject.data)


def test_step_from_zeros_where_full_learned_h0_fails_at_step_0(gru):
    verdict, checks = _judge(gru, "step")  # no --initial-state: zeros
    assert verdict.status == "fail"
    assert not checks["stream.matches_batch"].passed
    assert "first at step 0, output 'logits'" in checks["stream.matches_batch"].detail
    assert verdict.details["stream"]["first_divergence"]["step"] == 0
    assert checks["stream.state_used"].passed


def test_step_ignoring_its_state_fails_state_used_and_matches_batch(gru):
    verdict, checks = _judge(gru, "ignore_state", initial_state=gru["h0"])
    assert verdict.status == "fail"
    assert not checks["stream.state_used"].passed
    assert "['h']" in checks["stream.state_used"].detail
    assert not checks["stream.matches_batch"].passed
    assert "first at step 0" in checks["stream.matches_batch"].detail


def test_last_step_only_full_output_is_said(gru, tmp_path):
    """FULL returning no time axis is compared at the last step, and the details say so."""
    import torch

    from tests.parity.stream_models import GRUClassifier, _onnx

    torch.manual_seed(0)
    model = GRUClassifier().eval()

    class Last(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.model = model

        def forward(self, x):
            return self.model(x)[:, -1]

    x = torch.from_numpy(np.load(gru["inputs"])["x"][:2])
    program = torch.export.export(Last(), (x,), dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(program, str(tmp_path / "last.pt2"))
    full = _onnx(Last(), (x,), ["x"], ["logits"], tmp_path / "last.onnx")
    result = parity(torch_model=tmp_path / "last.pt2", onnx=full, inputs=gru["inputs"],
                    options=ParityOptions(stream_onnx=gru["step"], states={"h": "h_next"}, initial_state=gru["h0"]))
    assert result.verdict.status == "pass", result.verdict.message
    assert "last step only" in result.verdict.details["stream"]["outputs"]["logits"]["compared"]


def test_cli_stream_mode_exit_codes_and_report(gru, tmp_path):
    base = ["parity", "--torch", str(gru["pt2"]), "--onnx", str(gru["full"]), "--inputs", str(gru["inputs"]),
            "--stream-onnx", str(gru["step"]), "--state", "h=h_next"]
    assert main([*base, "--initial-state", str(gru["h0"]), "--report", str(tmp_path / "ok.json")]) == 0
    assert main([*base, "--report", str(tmp_path / "zeros.json")]) == 1
    report = json.loads((tmp_path / "zeros.json").read_text())
    failed = {c["name"] for c in report["checks"] if not c["passed"]}
    assert "stream.matches_batch" in failed
    assert main([*base[:-1], "hidden=h_next", "--report", str(tmp_path / "bad.json")]) == 2
    assert main([*base[:-2], "--report", str(tmp_path / "none.json")]) == 2  # --stream-onnx without --state
    assert main([*base[:-1], "h", "--report", str(tmp_path / "malformed.json")]) == 2  # not IN=OUT


def test_bad_input_names_file_field_expected_and_found(gru, tmp_path):
    with pytest.raises(InputError, match=r"state input 'hidden'.*one of STEP's inputs"):
        parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
               options=ParityOptions(stream_onnx=gru["step"], states={"hidden": "h_next"}))
    with pytest.raises(InputError, match="state output 'h_out'"):
        parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
               options=ParityOptions(stream_onnx=gru["step"], states={"h": "h_out"}))
    np.savez(tmp_path / "wrong.npz", h=np.zeros((1, 5), np.float32))
    with pytest.raises(InputError, match=r"wrong\.npz: h: expected shape \[12, 8\].*found shape \[1, 5\]"):
        parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
               options=ParityOptions(stream_onnx=gru["step"], states={"h": "h_next"},
                                     initial_state=tmp_path / "wrong.npz"))
    np.savez(tmp_path / "unknown.npz", h=np.zeros((1, 8), np.float32), c=np.zeros((1, 8), np.float32))
    with pytest.raises(InputError, match=r"unknown\.npz: c: .*state inputs \['h'\]"):
        parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
               options=ParityOptions(stream_onnx=gru["step"], states={"h": "h_next"},
                                     initial_state=tmp_path / "unknown.npz"))
    with pytest.raises(InputError, match="--stream-onnx"):
        parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
               options=ParityOptions(states={"h": "h_next"}))


DECODER_STATES = {"k": "k_next", "v": "v_next", "pos": "pos_next"}


@pytest.fixture(scope="module")
def decoder(tmp_path_factory):
    from tests.parity.stream_models import build_decoder

    return build_decoder(tmp_path_factory.mktemp("decoder"))


@pytest.mark.parametrize(("step", "status"), [("step", "pass"), ("stuck_position", "fail")])
def test_decoder_kv_cache_step_and_one_that_does_not_advance_positions(decoder, step, status):
    result = parity(torch_model=decoder["pt2"], onnx=decoder["full"], inputs=decoder["inputs"],
                    options=ParityOptions(stream_onnx=decoder[step], states=DECODER_STATES))
    checks = {c.name: c for c in result.verdict.checks}
    assert result.verdict.status == status, result.verdict.message
    assert result.verdict.details["stream"]["state_used"]["pos"]["judged"] is False  # integer: not perturbed
    if status == "pass":
        assert checks["stream.state_used"].passed  # the caches are judged
        # the second sequence from the first's final state finds its cache full: reported, not raised
        assert "final state" in checks["stream.reset"].detail
    else:  # step 0 is right; from step 1 on every step is embedded, cached and attends as position 0
        assert "first at step 1, output 'logits'" in checks["stream.matches_batch"].detail
        assert result.verdict.details["stream"]["first_divergence"]["step"] == 1
        # stuck at position 0, the step masks out every older cache entry: the cache goes unused
        assert not checks["stream.state_used"].passed


def test_component_stream_inputs(gru, tmp_path):
    """parity_op takes STEP and the initial state as optional artifacts and the pairs as a comma-separated string."""
    from kfp import dsl

    from skewgate.common.verdict import Verdict
    from skewgate.parity.component import parity_op

    outputs = {name: kind(uri=str(tmp_path / name)) for name, kind in (
        ("verdict", dsl.Artifact), ("metrics", dsl.Metrics), ("report", dsl.Markdown), ("attestation", dsl.Artifact),
        ("html_report", dsl.HTML), ("layer_plot", dsl.Artifact))}
    status = parity_op.python_func(
        torch_model=dsl.Model(uri=str(gru["pt2"])), onnx_model=dsl.Model(uri=str(gru["full"])),
        int8_model=dsl.Model(uri=""), eval_data=dsl.Dataset(uri=str(gru["inputs"])),
        stream_onnx=dsl.Model(uri=str(gru["step"])), initial_state=dsl.Dataset(uri=str(gru["h0"])), states="h=h_next",
        layerwise=False, **outputs)
    verdict = Verdict.read(tmp_path / "verdict")
    assert status == "pass", verdict.message
    assert {"stream.matches_batch", "stream.state_used", "stream.reset"} <= {c.name for c in verdict.checks}


@pytest.mark.parametrize(("model", "step", "at", "module"), [
    ("gru", "step", 0, "full.wh"),  # from zeros where FULL learned h0: the first module fed the state
    ("gru", "ignore_state", 0, "full.wh"),
    ("decoder", "stuck_position", 1, "full.k"),  # embedded at position 0: the first module after the embedding
])
def test_layerwise_localises_the_first_diverging_step_to_a_module(gru, decoder, model, step, at, module):
    files = {"gru": gru, "decoder": decoder}[model]
    states = {"h": "h_next"} if model == "gru" else DECODER_STATES
    initial = gru["h0"] if step == "ignore_state" else None
    result = parity(torch_model=files["pt2"], onnx=files["full"], inputs=files["inputs"],
                    options=ParityOptions(layerwise=True, stream_onnx=files[step], states=states,
                                          initial_state=initial))
    checks = {c.name: c for c in result.verdict.checks}
    assert result.verdict.status == "fail"
    detail = checks["stream.matches_batch"].detail
    assert f"first at step {at}, output 'logits'" in detail
    assert f"layerwise at step {at}: first diverging module {module!r}" in detail
    first = result.verdict.details["stream"]["first_divergence"]
    assert first["step"] == at and first["layerwise"]["module"] == module
    assert checks["layers.torch_vs_fp32"].passed  # FULL itself is fine on ORT: the divergence is STEP's


def test_layerwise_leaves_a_faithful_step_alone(gru):
    result = parity(torch_model=gru["pt2"], onnx=gru["full"], inputs=gru["inputs"],
                    options=ParityOptions(layerwise=True, stream_onnx=gru["step"], states={"h": "h_next"},
                                          initial_state=gru["h0"]))
    assert result.verdict.status == "pass", result.verdict.message
    assert "layerwise" not in (result.verdict.details["stream"]["first_divergence"] or {})


@pytest.mark.parametrize(("cast", "found"), [(True, r"float64\[4, 3\]"), (False, r"float32\[1, 3\]")],
                         ids=["next-state-float64", "next-state-other-shape"])
def test_a_next_state_unlike_its_input_is_refused_not_judged(tmp_path, cast, found):
    """STEP's next state must have the state input's dtype and shape at every step: one that does not (cast to
    float64, or a different shape) is an InputError naming the state output, never a verdict."""
    import onnx
    from onnx import TensorProto, helper

    from skewgate.parity.internals.stream import stream_checks

    nodes = [helper.make_node("Identity", ["x"], ["y"])]
    if cast:
        nodes.append(helper.make_node("Cast", ["h"], ["h_next"], to=TensorProto.DOUBLE))
        h_next = helper.make_tensor_value_info("h_next", TensorProto.DOUBLE, ["N", 3])
    else:
        nodes.append(helper.make_node("ReduceMean", ["h"], ["h_next"], axes=[0], keepdims=1))
        h_next = helper.make_tensor_value_info("h_next", TensorProto.FLOAT, [1, 3])
    graph = helper.make_graph(nodes, "step", [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 2]),
                                              helper.make_tensor_value_info("h", TensorProto.FLOAT, ["N", 3])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2]), h_next])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    onnx.save(model, tmp_path / "step.onnx")
    x = np.zeros((4, 5, 2), np.float32)
    with pytest.raises(InputError, match=r"state output 'h_next'.*state input 'h'.*float32\[4, 3\]") as raised:
        stream_checks(step_onnx=tmp_path / "step.onnx", states={"h": "h_next"}, feeds={"x": x},
                      full={"y": x}, full_outputs=["y"], tolerances={})
    assert re.search(found, str(raised.value))
