"""The FP16 path: the zoo's faithful models pass as converted; softmax over logits past FP16's range is caught
at the value that overflows, and the proposed keep-in-FP32 list is checked to fix it (and re-checked here as a
given FP16 model)."""

import json

import numpy as np
import onnx
import pytest
import torch

from skewgate.cli import main
from skewgate.parity.core import ParityOptions, parity
from tests.zoo import ZOO, export, save

FINALS = ParityOptions(layerwise=False)


@pytest.fixture(scope="module")
def overflowing(tmp_path_factory):
    """softmax_head with head weights ×1e4: logits up to ~1e5, past FP16's 65504 (FP32 softmax is fine)."""
    files = save("softmax_head", tmp_path_factory.mktemp("fp16"), weight_scale=1e4, seed=3)
    return files, export(files)


@pytest.mark.parametrize("name", list(ZOO))
def test_faithful_zoo_model_passes_fp16(zoo, name):
    files, onnx_path = zoo(name)
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=True, options=FINALS)
    assert result.verdict.status == "pass", result.verdict.message
    assert result.verdict.details["fp32_vs_fp16"]["keep_fp32"] == []
    assert result.layers["fp32_vs_fp16"]  # compared value by value


def test_softmax_overflow_is_caught_and_the_proposed_fp32_list_fixes_it(overflowing, tmp_path):
    files, onnx_path = overflowing
    fixed = tmp_path / "fixed.fp16.onnx"
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=True, fp16_out=fixed,
                    options=FINALS)
    assert result.verdict.status == "fail"
    details = result.verdict.details["fp32_vs_fp16"]
    first = details["first_failure"]
    assert first["overflowed"] > 0 and first["op"] in {"Gemm", "Mul"}, first
    assert "overflows" in result.verdict.check("fp32_vs_fp16.values").detail
    proposal = result.verdict.check("fp32_vs_fp16.proposal")
    assert proposal.passed, proposal.detail
    assert "Softmax" in details["keep_fp32_ops"]
    assert details["proposal_rounds"][-1]["passes"] is True
    # the written model, judged afresh as a given FP16 model, passes; the proposed nodes are FP32 in it
    again = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=fixed, options=FINALS)
    assert again.verdict.status == "pass", again.verdict.message
    kept = {n.name for n in onnx.load(str(fixed)).graph.node}
    assert set(details["keep_fp32"]) <= kept


def test_given_fp16_model_that_overflows_fails(overflowing, tmp_path):
    from skewgate.parity.internals.fp16 import convert

    files, onnx_path = overflowing
    onnx.save(convert(onnx.load(str(onnx_path)), []), str(tmp_path / "plain.fp16.onnx"))
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=tmp_path / "plain.fp16.onnx",
                    options=FINALS)
    assert result.verdict.status == "fail"
    assert result.verdict.details["fp32_vs_fp16"]["candidate"].endswith("plain.fp16.onnx")
    assert result.verdict.check("fp32_vs_fp16.proposal").passed


def test_cli_fp16_flag(overflowing, tmp_path):
    files, onnx_path = overflowing
    code = main(["parity", "--torch", str(files.pt2), "--onnx", str(onnx_path), "--inputs", str(files.inputs),
                 "--fp16", "--fp16-out", str(tmp_path / "f.onnx"), "--report", str(tmp_path / "r.json")])
    assert code == 1
    report = json.loads((tmp_path / "r.json").read_text())
    assert report["details"]["fp32_vs_fp16"]["first_failure"]["overflowed"] > 0
    assert (tmp_path / "f.onnx").is_file()
    assert main(["parity", "--torch", str(files.pt2), "--onnx", str(onnx_path), "--inputs", str(files.inputs),
                 "--fp16", str(tmp_path / "f.onnx")]) == 0


@pytest.mark.gpu
def test_overflow_caught_on_the_cuda_provider(overflowing):
    import onnxruntime

    if "CUDAExecutionProvider" not in onnxruntime.get_available_providers():
        pytest.skip("ONNX Runtime here has no CUDA execution provider")
    files, onnx_path = overflowing
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=True,
                    options=ParityOptions(layerwise=False, fp16_cuda=True))
    assert result.verdict.status == "fail"
    assert result.verdict.details["fp32_vs_fp16"]["first_failure"]["overflowed"] > 0
    assert result.verdict.check("fp32_vs_fp16.proposal").passed


def test_pipeline_step_judges_the_fp16_candidate_when_asked(overflowing, tmp_path):
    from skewgate.common.recording import TrackingOptions
    from skewgate.parity.run import run

    files, onnx_path = overflowing
    common = {"torch_model": str(files.pt2), "onnx": str(onnx_path), "int8": "", "inputs": str(files.inputs),
              "triton_url": "", "triton_model": "", "plot": str(tmp_path / "p.png"), "html": str(tmp_path / "p.html"),
              "options": ParityOptions(layerwise=True), "tracking": TrackingOptions()}
    without = run(**common).verdict
    assert without.status == "pass" and "fp32_vs_fp16" not in without.details["pairs"]
    verdict = run(**common, fp16=True).verdict
    assert verdict.status == "fail" and not verdict.check("fp32_vs_fp16.values").passed
    assert "<h2>FP32 vs FP16 (fp32_vs_fp16)</h2>" in (tmp_path / "p.html").read_text()


def test_given_fp16_model_that_does_not_fit_exits_2(zoo, tmp_path):
    files, onnx_path = zoo("layernorm_mlp")
    base = ["parity", "--torch", str(files.pt2), "--onnx", str(onnx_path), "--inputs", str(files.inputs), "--fp16"]
    assert main([*base, str(tmp_path / "missing.onnx")]) == 2
    assert main([*base, str(zoo("token_ids")[1])]) == 2  # another model's inputs (`ids`, not `x`)


def test_given_fp16_model_below_the_sqnr_floor_is_named(zoo, tmp_path):
    """No overflow: one FP16 weight 5% off (as a careless re-quantisation would leave it) costs ~26 dB at the
    value its node makes; that value is named, with the SQNR, as the first failure."""
    from onnx import numpy_helper

    from skewgate.parity.internals.fp16 import convert

    files, onnx_path = zoo("layernorm_mlp")
    model = convert(onnx.load(str(onnx_path)), [])
    node = next(n for n in model.graph.node if n.op_type in {"Gemm", "MatMul"})
    weight = next(i for i in model.graph.initializer if i.name in node.input[1:])
    weight.CopyFrom(numpy_helper.from_array((numpy_helper.to_array(weight) * np.float16(1.05)), weight.name))
    onnx.save(model, str(tmp_path / "off.fp16.onnx"))
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=tmp_path / "off.fp16.onnx",
                    options=FINALS)
    first = result.verdict.details["fp32_vs_fp16"]["first_failure"]
    assert result.verdict.status == "fail"
    assert first["overflowed"] == 0 and first["sqnr_db"] < 35
    assert first["value"] == node.output[0]
    assert "SQNR" in result.verdict.check("fp32_vs_fp16.values").detail


def test_a_causal_mask_saturated_to_fp16s_limit_is_not_a_failure(zoo):
    """The exporter writes the −inf mask as float32's minimum; FP16 holds it (and the scores added to it) at
    −65504, which softmax treats alike: saturated, reported, and judged by the values computed from it."""
    files, onnx_path = zoo("causal_transformer")
    result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs, fp16=True, options=FINALS)
    assert result.verdict.status == "pass", result.verdict.message
    saturated = {row["value"]: row for row in result.layers["fp32_vs_fp16"] if row["saturated"]}
    assert {row["op"] for row in saturated.values()} >= {"Where", "Add"}
    assert all(row["module"].endswith("self_attn") for row in saturated.values())


class _LargeOffset(torch.nn.Module):
    """(linear(x) + 1e6) − 1e6: FP32 keeps x's digits; FP16 clamps the constant to 65504, so the sum saturates
    (not a failure by itself) and the difference has lost them (a failure, traced back to the sum)."""

    def __init__(self) -> None:
        super().__init__()
        self.linear = torch.nn.Linear(6, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return (self.linear(x) + 1e6) - 1e6


def test_saturation_that_matters_fails_downstream_and_the_fix_keeps_its_source(tmp_path):
    from skewgate.export.core import export_model

    torch.manual_seed(0)
    x = np.random.default_rng(0).normal(size=(64, 6)).astype(np.float32)
    np.savez(tmp_path / "x.npz", x=x)
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(_LargeOffset().eval(), (torch.from_numpy(x[:4]),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, str(tmp_path / "m.pt2"))
    assert export_model(model=tmp_path / "m.pt2", inputs=tmp_path / "x.npz", out=tmp_path / "m.onnx").status == "pass"
    fixed = tmp_path / "fixed.fp16.onnx"
    result = parity(torch_model=tmp_path / "m.pt2", onnx=tmp_path / "m.onnx", inputs=tmp_path / "x.npz", fp16=True,
                    fp16_out=fixed, options=FINALS)
    assert result.verdict.status == "fail"
    details = result.verdict.details["fp32_vs_fp16"]
    assert details["first_failure"]["overflowed"] == 0 and details["first_failure"]["sqnr_db"] < 35
    # the graph output, named by the node that computes it (not the converter's Cast back to FP32)
    assert (details["first_failure"]["value"], details["first_failure"]["op"]) == ("sub_2", "Sub")
    assert {row["op"] for row in result.layers["fp32_vs_fp16"] if row["saturated"]} == {"Add"}
    assert result.verdict.check("fp32_vs_fp16.proposal").passed
    assert details["keep_fp32_ops"] == ["Add", "Sub"]
    again = parity(torch_model=tmp_path / "m.pt2", onnx=tmp_path / "m.onnx", inputs=tmp_path / "x.npz", fp16=fixed,
                   options=FINALS)
    assert again.verdict.status == "pass", again.verdict.message


def _exported(module: torch.nn.Module, directory, features: int):
    """`module` exported as skewgate exports (dynamic batch), with 64 normal inputs: (pt2, onnx, inputs)."""
    from skewgate.export.core import export_model

    x = np.random.default_rng(0).normal(size=(64, features)).astype(np.float32)
    np.savez(directory / "x.npz", x=x)
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(module.eval(), (torch.from_numpy(x[:4]),), dynamic_shapes={"x": {0: batch}})
    torch.export.save(program, str(directory / "m.pt2"))
    verdict = export_model(model=directory / "m.pt2", inputs=directory / "x.npz", out=directory / "m.onnx")
    assert verdict.status == "pass", verdict.message
    return directory / "m.pt2", directory / "m.onnx", directory / "x.npz"


class _LayerScaled(torch.nn.Module):
    """`blocks` ConvNeXt-like residual blocks, h + γ·mlp(h) with the layer scale γ at its init value 1e-6, and a
    classifier head: γ·mlp(h) (~1e-6) lies in FP16's subnormals, and the residual Add absorbs it."""

    def __init__(self, blocks: int) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.stem = torch.nn.Linear(6, 16)
        self.mlps = torch.nn.ModuleList(torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.GELU(),
                                                            torch.nn.Linear(32, 16)) for _ in range(blocks))
        self.gammas = torch.nn.ParameterList(torch.nn.Parameter(torch.full((16,), 1e-6)) for _ in range(blocks))
        self.head = torch.nn.Linear(16, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.stem(x)
        for mlp, gamma in zip(self.mlps, self.gammas, strict=True):
            h = h + gamma * mlp(h)
        return self.head(h)


def test_underflow_the_residual_absorbs_is_not_a_failure(tmp_path):
    """Each layer-scaled branch keeps a few bits in FP16's subnormals (~18 dB alone): underflowed, reported, and
    judged by the residual Add that reads it, which is within the floor. (Judged by itself, each failed, and the
    keep-in-FP32 search took one block a round: ten blocks ran out of its 8 rounds.)"""
    pt2, onnx_path, inputs = _exported(_LayerScaled(blocks=10), tmp_path, 6)
    result = parity(torch_model=pt2, onnx=onnx_path, inputs=inputs, fp16=True, options=FINALS)
    assert result.verdict.status == "pass", result.verdict.message
    details = result.verdict.details["fp32_vs_fp16"]
    assert details["keep_fp32"] == [] and details["top1_agreement"] == 1.0
    # γ·mlp(h) of each block: every element (64 samples × 16 features) below FP16's normal range
    branches = [row for row in result.layers["fp32_vs_fp16"] if row["op"] == "Mul"]
    assert len(branches) == 10 and all(row["underflowed"] == 64 * 16 for row in branches), branches
    assert all(not row["diverged"] for row in result.layers["fp32_vs_fp16"])
    assert "underflow" in result.verdict.check("fp32_vs_fp16.values").detail


class _UnderflowScaledBack(torch.nn.Module):
    """(linear(x) · 1e-7) · 1e4, with `between` in the middle: FP16 holds 1e-7 as 2·2⁻²⁴ (19% off) and the
    product in its subnormals (a bit or two each), and the second Mul scales the lost digits back into FP16's
    normal range, where they fail (on any provider: the CPU's upcasting spares the product's storage, not the
    constant) — traced back through `between` to the first Mul."""

    def __init__(self, between: torch.nn.Module) -> None:
        super().__init__()
        torch.manual_seed(0)
        self.linear = torch.nn.Linear(6, 4)
        self.between = between

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.between(self.linear(x) * 1e-7) * 1e4


@pytest.mark.parametrize(("between", "ops"), [(torch.nn.Identity(), ["Mul"]), (torch.nn.ReLU(), ["Mul", "Relu"])],
                         ids=["direct", "through_relu"])
def test_underflow_that_matters_fails_downstream_and_the_fix_keeps_its_source(tmp_path, between, ops):
    pt2, onnx_path, inputs = _exported(_UnderflowScaledBack(between), tmp_path, 6)
    fixed = tmp_path / "fixed.fp16.onnx"
    result = parity(torch_model=pt2, onnx=onnx_path, inputs=inputs, fp16=True, fp16_out=fixed, options=FINALS)
    assert result.verdict.status == "fail"
    details = result.verdict.details["fp32_vs_fp16"]
    first = details["first_failure"]
    assert first["overflowed"] == 0 and first["sqnr_db"] < 35 and first["op"] == "Mul", first
    # what it reads underflows, and passes by itself: judged by the Mul that fails
    underflowed = [row for row in result.layers["fp32_vs_fp16"] if row["underflowed"]]
    assert [row["op"] for row in underflowed] == ops and not any(row["diverged"] for row in underflowed)
    # the first proposal keeps the Mul that failed and every node back to where the range was lost
    assert result.verdict.check("fp32_vs_fp16.proposal").passed
    assert len(details["proposal_rounds"]) == 1 and details["keep_fp32_ops"] == ops
    assert len(details["keep_fp32"]) == len(ops) + 1
    again = parity(torch_model=pt2, onnx=onnx_path, inputs=inputs, fp16=fixed, options=FINALS)
    assert again.verdict.status == "pass", again.verdict.message
