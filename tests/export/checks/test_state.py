"""export's step-model contract (`--state IN=OUT`): the faithful GRU and KV-cache decoder STEPs of
`tests/parity/stream_models.py` pass; a next state that cannot be fed back (other shape, other dtype) fails
`state.contract`; a next state that mixes the samples of the batch fails `state.batch_invariance`."""

import json

import numpy as np
import pytest
import torch

from skewgate.cli import main
from skewgate.common.errors import InputError
from skewgate.export.core import export_model
from skewgate.export.run import ExportOptions
from tests.parity.stream_models import FEATURES, HIDDEN, SAMPLES, STEPS, WIDTH, Decoder, DecoderStep, GRUClassifier


class GruStep(torch.nn.Module):
    """The faithful GRU step, or a planted defect: `narrow` (the next state loses a unit), `double` (the next state
    in float64), `mixes_batch` (the next state leans on the batch's mean state)."""

    def __init__(self, defect: str | None = None) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.full, self.defect = GRUClassifier().eval(), defect

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h_next = self.full.cell(x, h)
        logits = self.full.head(h_next)
        if self.defect == "narrow":
            h_next = h_next[:, :-1]
        elif self.defect == "double":
            h_next = h_next.double()
        elif self.defect == "mixes_batch":
            h_next = h_next + 0.5 * h.mean(0, keepdim=True)
        return logits, h_next


def _save(module, args, path):
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(module, args, dynamic_shapes=tuple({0: batch} for _ in args))
    torch.export.save(program, str(path))
    return path


@pytest.fixture(scope="module")
def gru(tmp_path_factory):
    directory = tmp_path_factory.mktemp("gru_step")
    x = np.random.default_rng(5).normal(size=(SAMPLES, FEATURES)).astype(np.float32)
    np.savez(directory / "x.npz", x=x)
    args = (torch.from_numpy(x[:2]), torch.zeros(2, HIDDEN))
    files = {"inputs": directory / "x.npz", "dir": directory}
    for defect in (None, "narrow", "double", "mixes_batch"):
        files[defect or "step"] = _save(GruStep(defect).eval(), args, directory / f"{defect or 'step'}.pt2")
    return files


def _export(files, model, tmp_path, states, inputs=None):
    verdict = export_model(model=files[model], inputs=inputs or files["inputs"], out=tmp_path / f"{model}.onnx",
                           options=ExportOptions(states=states, max_samples=8))
    return verdict, {c.name: c for c in verdict.checks}


def test_faithful_gru_step_passes_from_a_zero_state(gru, tmp_path):
    verdict, checks = _export(gru, "step", tmp_path, ("h=#1",))
    assert verdict.status == "pass", verdict.message
    assert checks["state.contract"].passed and checks["state.batch_invariance"].passed
    assert "h→" in checks["state.contract"].detail
    states = verdict.details["states"]
    assert states["zeros"] == ["h"] and set(states["pairs"]) == {"h"}


def test_the_state_may_come_from_the_example_file(gru, tmp_path):
    rng = np.random.default_rng(6)
    h = rng.normal(size=(SAMPLES, HIDDEN)).astype(np.float32)
    np.savez(tmp_path / "xh.npz", x=np.load(gru["inputs"])["x"], h=h)
    verdict, _ = _export(gru, "step", tmp_path, ("h=#1",), inputs=tmp_path / "xh.npz")
    assert verdict.status == "pass", verdict.message
    assert verdict.details["states"]["zeros"] == []


@pytest.mark.parametrize(("defect", "found"), [("narrow", "float32[8, 7]"), ("double", "float64[8, 8]")])
def test_a_next_state_that_cannot_be_fed_back_fails_the_contract(gru, tmp_path, defect, found):
    verdict, checks = _export(gru, defect, tmp_path, ("h=#1",))
    assert verdict.status == "fail"
    assert not checks["state.contract"].passed
    assert "fed h float32[8, 8], it returns" in checks["state.contract"].detail
    assert found in checks["state.contract"].detail
    assert not checks["state.batch_invariance"].passed  # not evaluated: said so
    assert "not evaluated" in checks["state.batch_invariance"].detail


def test_a_next_state_mixing_the_batch_fails_batch_invariance_with_state(gru, tmp_path):
    """From zeros the mixing term is zero (the plain batch-invariance checks pass); fed the state it returned
    after one step, each sample alone gives another next state than in the batch."""
    verdict, checks = _export(gru, "mixes_batch", tmp_path, ("h=#1",))
    assert verdict.status == "fail"
    assert checks["batch_invariance.onnxruntime"].passed and checks["batch_invariance.torch"].passed
    assert checks["state.contract"].passed
    assert not checks["state.batch_invariance"].passed
    assert "batch" in checks["state.batch_invariance"].detail


def test_unknown_state_names_are_input_errors_naming_the_graph(gru, tmp_path):
    with pytest.raises(InputError, match=r"hidden.*one of its inputs \['x', 'h'\]"):
        _export(gru, "step", tmp_path, ("hidden=#1",))
    with pytest.raises(InputError, match=r"h=h_next.*#0 .*#1 "):
        _export(gru, "step", tmp_path, ("h=h_next",))
    with pytest.raises(InputError, match="IN=OUT"):
        _export(gru, "step", tmp_path, ("h",))


def test_cli_state_flag(gru, tmp_path):
    base = ["export", "--model", str(gru["step"]), "--inputs", str(gru["inputs"]), "--out", str(tmp_path / "s.onnx"),
            "--max-samples", "4"]
    assert main([*base, "--state", "h=#1", "--report", str(tmp_path / "ok.json")]) == 0
    report = json.loads((tmp_path / "ok.json").read_text())
    assert {"state.contract", "state.batch_invariance"} <= {c["name"] for c in report["checks"]}
    assert main([*base, "--state", "c=#1", "--report", str(tmp_path / "bad.json")]) == 2


def test_faithful_kv_cache_decoder_step_passes(tmp_path):
    torch.manual_seed(1)
    step = DecoderStep(Decoder().eval()).eval()
    x = np.random.default_rng(4).normal(size=(SAMPLES, WIDTH)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)  # the cache and the position start at zeros
    cache = torch.zeros(2, STEPS, WIDTH)
    args = (torch.from_numpy(x[:2]), cache, cache.clone(), torch.zeros(2, dtype=torch.int64))
    files = {"step": _save(step, args, tmp_path / "dec.pt2"), "inputs": tmp_path / "x.npz"}
    verdict, checks = _export(files, "step", tmp_path, ("k=#1,v=#2", "pos=#3"))
    assert verdict.status == "pass", verdict.message
    assert checks["state.contract"].passed and checks["state.batch_invariance"].passed
    assert verdict.details["states"]["zeros"] == ["k", "v", "pos"]
