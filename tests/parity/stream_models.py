"""Sequence models for stream mode (`internals/stream.py`): a GRU classifier that learned its initial state, as
evaluated (FULL: the whole sequence, logits per step) and as served (STEP: one step, the hidden state in and out),
with planted STEP defects."""

from __future__ import annotations

import contextlib
import io
from pathlib import Path

import numpy as np
import torch
from torch import nn

FEATURES, HIDDEN, CLASSES, STEPS, SAMPLES = 4, 8, 3, 6, 12


class GRUClassifier(nn.Module):
    """A GRU cell unrolled over the sequence, from a learned initial state `h0`, with a classifier head per step."""

    def __init__(self) -> None:
        super().__init__()
        self.h0 = nn.Parameter(torch.randn(1, HIDDEN))
        self.wi = nn.Linear(FEATURES, 3 * HIDDEN)
        self.wh = nn.Linear(HIDDEN, 3 * HIDDEN)
        self.head = nn.Linear(HIDDEN, CLASSES)

    def cell(self, x: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        ir, iz, in_ = self.wi(x).chunk(3, dim=-1)
        hr, hz, hn = self.wh(h).chunk(3, dim=-1)
        r, z = torch.sigmoid(ir + hr), torch.sigmoid(iz + hz)
        n = torch.tanh(in_ + r * hn)
        return (1 - z) * n + z * h

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [N, T, F] → logits [N, T, C]
        h = self.h0.expand(x.shape[0], HIDDEN)
        logits = []
        for t in range(x.shape[1]):
            h = self.cell(x[:, t], h)
            logits.append(self.head(h))
        return torch.stack(logits, dim=1)


class Step(nn.Module):
    """One step of the same GRU: (x [N, F], h [N, H]) → (logits [N, C], h_next [N, H]). `defect`: `ignore_state`
    (the cell always starts from zeros, whatever state it is fed)."""

    def __init__(self, full: GRUClassifier, defect: str | None = None) -> None:
        super().__init__()
        self.full, self.defect = full, defect

    def forward(self, x: torch.Tensor, h: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h_next = self.full.cell(x, torch.zeros_like(h) if self.defect == "ignore_state" else h)
        return self.full.head(h_next), h_next


def _onnx(module: nn.Module, args: tuple[torch.Tensor, ...], names: list[str], outputs: list[str],
          out: Path) -> Path:
    batch = torch.export.Dim("batch", min=1, max=1024)
    program = torch.export.export(module, args, dynamic_shapes=tuple({0: batch} for _ in args))
    with contextlib.redirect_stdout(io.StringIO()):
        torch.onnx.export(program, args, dynamo=True, verbose=False, input_names=names,
                          output_names=outputs).save(str(out))
    return out


def build(directory: Path) -> dict[str, Path]:
    """FULL (.pt2 and .onnx), the faithful STEP, a STEP ignoring its state, the sequences and the learned h0."""
    torch.manual_seed(0)
    model = GRUClassifier().eval()
    x = np.random.default_rng(3).normal(size=(SAMPLES, STEPS, FEATURES)).astype(np.float32)
    np.savez(directory / "seq.npz", x=x)
    np.savez(directory / "h0.npz", h=model.h0.detach().numpy())
    sample = (torch.from_numpy(x[:2]),)
    program = torch.export.export(model, sample, dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(program, str(directory / "full.pt2"))
    files = {"pt2": directory / "full.pt2", "inputs": directory / "seq.npz", "h0": directory / "h0.npz",
             "full": _onnx(model, sample, ["x"], ["logits"], directory / "full.onnx")}
    step_args = (torch.from_numpy(x[:2, 0]), torch.zeros(2, HIDDEN))
    with torch.no_grad():
        for defect in (None, "ignore_state"):
            files[defect or "step"] = _onnx(Step(model, defect), step_args, ["x", "h"], ["logits", "h_next"],
                                            directory / f"step_{defect or 'faithful'}.onnx")
    return files


WIDTH = 8  # the decoder's model width


class Decoder(nn.Module):
    """One causal self-attention layer with learned positional embeddings, over a whole sequence (FULL)."""

    def __init__(self) -> None:
        super().__init__()
        self.pe = nn.Parameter(torch.randn(STEPS, WIDTH))
        self.q, self.k, self.v = (nn.Linear(WIDTH, WIDTH) for _ in range(3))
        self.head = nn.Linear(WIDTH, CLASSES)

    def forward(self, x: torch.Tensor) -> torch.Tensor:  # x: [N, T, D] → [N, T, C]
        steps = x.shape[1]
        h = x + self.pe[:steps]
        scores = self.q(h) @ self.k(h).transpose(1, 2) / WIDTH**0.5
        future = torch.ones(steps, steps, dtype=torch.bool).triu(1)
        attended = scores.masked_fill(future, float("-inf")).softmax(-1) @ self.v(h)
        return self.head(attended + h)


class DecoderStep(nn.Module):
    """One step of the same decoder with a KV cache of STEPS slots and a position counter: (x [N, D], k, v
    [N, STEPS, D], pos [N]) → (logits, k_next, v_next, pos_next). `defect`: `stuck_position` (the position is never
    advanced: every step is embedded, cached and attends as position 0)."""

    def __init__(self, full: Decoder, defect: str | None = None) -> None:
        super().__init__()
        self.full, self.defect = full, defect

    def forward(self, x: torch.Tensor, k: torch.Tensor, v: torch.Tensor, pos: torch.Tensor
                ) -> tuple[torch.Tensor, ...]:
        slots = torch.arange(STEPS)
        h = x + self.full.pe[pos]
        here = (slots[None, :] == pos[:, None]).unsqueeze(-1).to(x.dtype)  # [N, STEPS, 1]: this step's slot
        k = k * (1 - here) + here * self.full.k(h)[:, None]
        v = v * (1 - here) + here * self.full.v(h)[:, None]
        scores = (self.full.q(h)[:, None] * k).sum(-1) / WIDTH**0.5
        scores = scores.masked_fill(slots[None, :] > pos[:, None], float("-inf"))
        attended = (scores.softmax(-1)[..., None] * v).sum(1)
        return self.full.head(attended + h), k, v, pos if self.defect == "stuck_position" else pos + 1


def build_decoder(directory: Path) -> dict[str, Path]:
    """FULL (.pt2, .onnx), the faithful STEP and one that never advances its position, and the sequences."""
    torch.manual_seed(1)
    model = Decoder().eval()
    x = np.random.default_rng(4).normal(size=(SAMPLES, STEPS, WIDTH)).astype(np.float32)
    np.savez(directory / "dec_seq.npz", x=x)
    sample = (torch.from_numpy(x[:2]),)
    program = torch.export.export(model, sample, dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(program, str(directory / "dec.pt2"))
    files = {"pt2": directory / "dec.pt2", "inputs": directory / "dec_seq.npz",
             "full": _onnx(model, sample, ["x"], ["logits"], directory / "dec.onnx")}
    cache = torch.zeros(2, STEPS, WIDTH)
    step_args = (torch.from_numpy(x[:2, 0]), cache, cache.clone(), torch.zeros(2, dtype=torch.int64))
    with torch.no_grad():
        for defect in (None, "stuck_position"):
            files[defect or "step"] = _onnx(DecoderStep(model, defect), step_args, ["x", "k", "v", "pos"],
                                            ["logits", "k_next", "v_next", "pos_next"],
                                            directory / f"dec_step_{defect or 'faithful'}.onnx")
    return files


class LastStep(nn.Module):
    """A sequence classifier as evaluated: the GRU's logits at the last step only ([N, T, F] → [N, C])."""

    def __init__(self, full: GRUClassifier) -> None:
        super().__init__()
        self.full = full

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.full(x)[:, -1]


def build_release(directory: Path, *, samples: int = 256) -> dict[str, Path]:
    """What the release gate takes for a stateful candidate: FULL (`LastStep`, .pt2), its faithful STEP (.onnx)
    and learned initial state (.npz), evaluation sequences labelled with FULL's answers, calibration sequences,
    and reference/current features (each sequence's per-feature mean, both halves of one distribution)."""
    torch.manual_seed(0)
    gru = GRUClassifier().eval()
    model = LastStep(gru).eval()
    rng = np.random.default_rng(5)
    x = rng.normal(size=(samples, STEPS, FEATURES)).astype(np.float32)
    with torch.no_grad():
        labels = model(torch.from_numpy(x)).argmax(-1).numpy()
    files = {"eval": directory / "eval.npz", "calibration": directory / "calibration.npz",
             "h0": directory / "h0.npz", "pt2": directory / "full.pt2", "step": directory / "step.onnx"}
    np.savez(files["eval"], x=x, labels=labels)
    np.savez(files["calibration"], x=rng.normal(size=(4 * samples, STEPS, FEATURES)).astype(np.float32))
    np.savez(files["h0"], h=gru.h0.detach().numpy())
    features = x.mean(axis=1)
    for name, half in (("reference", features[: samples // 2]), ("current", features[samples // 2:])):
        files[name] = directory / f"{name}.npz"
        np.savez(files[name], **{f"f{i}": half[:, i] for i in range(FEATURES)})
    program = torch.export.export(model, (torch.from_numpy(x[:2]),),
                                  dynamic_shapes=({0: torch.export.Dim("batch", min=1, max=1024)},))
    torch.export.save(program, str(files["pt2"]))
    step_args = (torch.from_numpy(x[:2, 0]), torch.zeros(2, HIDDEN))
    with torch.no_grad():
        _onnx(Step(gru), step_args, ["x", "h"], ["logits", "h_next"], files["step"])
    return files
