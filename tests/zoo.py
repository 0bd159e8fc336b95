"""A zoo of small architectures built from torch alone, the shapes teams ship: seeded, seconds each.

`save(name, directory)` writes `<name>.pt2` (exported with a dynamic batch dimension) and `<name>.npz` (example
inputs named after `forward`'s arguments, plus `labels`: the FP32 model's own top-1 class of each sample, so
a quantised or half-precision copy can be scored against the model it stands for). `export(name, directory)`
also runs skewgate's own export and returns the `.onnx`. The models are untrained but not degenerate: their
logits are scaled so the top-1 class is decided by a clear margin on most samples.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import nn

SAMPLES = 96


class Transformer(nn.Module):
    """Token features → a 2-layer encoder (GELU, LayerNorm, 4-head attention) → mean pool → 5 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.proj = nn.Linear(12, 32)
        layer = nn.TransformerEncoderLayer(32, 4, dim_feedforward=64, dropout=0.1, activation="gelu",
                                           batch_first=True)
        self.encoder = nn.TransformerEncoder(layer, num_layers=2, enable_nested_tensor=False)
        self.head = nn.Linear(32, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.encoder(self.proj(x)).mean(1)) * 4.0


class CausalTransformer(Transformer):
    """The encoder above as a decoder-only model uses it: each position attends to itself and earlier ones, through
    a −inf mask built inside `forward` (non-finite constants in the program, −inf scores in the graph)."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        steps = x.shape[1]
        mask = torch.triu(torch.full((steps, steps), float("-inf")), diagonal=1)
        return self.head(self.encoder(self.proj(x), mask=mask, is_causal=True)[:, -1]) * 4.0


class TokenIds(nn.Module):
    """int64 token ids → embedding → LayerNorm → 1-D conv over the sequence → max pool → 4 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.embed = nn.Embedding(100, 24)
        self.norm = nn.LayerNorm(24)
        self.conv = nn.Conv1d(24, 32, 3, padding=1)
        self.head = nn.Linear(32, 4)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.conv(self.norm(self.embed(ids)).transpose(1, 2)).relu()
        return self.head(h.amax(2)) * 3.0


class Recurrent(nn.Module):
    """A 2-layer LSTM over 10 steps → the last step's state → 3 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.lstm = nn.LSTM(8, 24, num_layers=2, batch_first=True)
        self.head = nn.Linear(24, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        out, _ = self.lstm(x)
        return self.head(out[:, -1]) * 8.0


class TwoInTwoOut(nn.Module):
    """An image and a metadata vector in; class logits and a 2-value regression out."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(1, 8, 3, padding=1)
        self.side = nn.Linear(4, 16)  # not `meta`: a module named like an input breaks the exporter
        self.classes = nn.Linear(8 * 4 * 4 + 16, 6)
        self.regress = nn.Linear(8 * 4 * 4 + 16, 2)

    def forward(self, image: torch.Tensor, meta: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        h = nn.functional.max_pool2d(self.conv(image).relu(), 2).flatten(1)
        both = torch.cat([h, self.side(meta).relu()], dim=1)
        return self.classes(both) * 4.0, self.regress(both)


class ChannelsLast(nn.Module):
    """An NHWC image (as decoders hand them over) permuted to NCHW → conv, BatchNorm, pool → 5 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 12, 3, padding=1)
        self.bn = nn.BatchNorm2d(12)
        self.head = nn.Linear(12, 5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.bn(self.conv(x.permute(0, 3, 1, 2))).relu()
        return self.head(h.mean((2, 3))) * 6.0


class NormMlp(nn.Module):
    """Linear → LayerNorm → tanh-approximated GELU, twice → 4 classes."""

    def __init__(self) -> None:
        super().__init__()
        self.blocks = nn.Sequential(
            nn.Linear(20, 48), nn.LayerNorm(48), nn.GELU(approximate="tanh"),
            nn.Linear(48, 48), nn.LayerNorm(48), nn.GELU(approximate="tanh"))
        self.head = nn.Linear(48, 4)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.head(self.blocks(x)) * 3.0


class SoftmaxHead(nn.Module):
    """A CNN whose output is softmax over large logits (`logit_scale`): confident probabilities, the head that
    overflows in FP16 once the logits pass 65504 (`weight_scale`, say 1e4, scales the head's weights so they do;
    the scale itself stays a representable FP16 constant)."""

    def __init__(self, logit_scale: float = 30.0, weight_scale: float = 1.0) -> None:
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(1, 8, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
                                      nn.Conv2d(8, 16, 3, padding=1), nn.ReLU())
        self.head = nn.Linear(16 * 4 * 4, 10)
        with torch.no_grad():
            self.head.weight *= weight_scale
            self.head.bias *= weight_scale
        self.logit_scale = logit_scale

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.softmax(self.head(self.features(x).flatten(1)) * self.logit_scale, dim=1)


def _normal(*shape: int) -> Callable[[np.random.Generator, int], np.ndarray]:
    return lambda rng, n: rng.normal(size=(n, *shape)).astype(np.float32)


def _ids(rng: np.random.Generator, n: int) -> np.ndarray:
    return rng.integers(0, 100, size=(n, 16), dtype=np.int64)


@dataclass(frozen=True)
class Spec:
    build: Callable[[], nn.Module]
    inputs: dict[str, Callable[[np.random.Generator, int], np.ndarray]]  # forward's argument → sampler
    # the module path of the attention block, for planted defects (None: the model has none)
    attention: str | None = None


ZOO: dict[str, Spec] = {
    "transformer": Spec(Transformer, {"x": _normal(8, 12)}, attention="encoder.layers.0.self_attn"),
    "causal_transformer": Spec(CausalTransformer, {"x": _normal(8, 12)}, attention="encoder.layers.0.self_attn"),
    "token_ids": Spec(TokenIds, {"ids": _ids}),
    "lstm": Spec(Recurrent, {"x": _normal(10, 8)}),
    "two_in_two_out": Spec(TwoInTwoOut, {"image": _normal(1, 8, 8), "meta": _normal(4)}),
    "channels_last": Spec(ChannelsLast, {"x": _normal(8, 8, 3)}),
    "layernorm_mlp": Spec(NormMlp, {"x": _normal(20)}),
    "softmax_head": Spec(SoftmaxHead, {"x": _normal(1, 8, 8)}),
}


@dataclass(frozen=True)
class ZooFiles:
    name: str
    pt2: Path
    inputs: Path  # .npz: forward's arguments, plus `labels`
    module: nn.Module  # the eval-mode model, to compute references in tests


def model(name: str, *, seed: int = 0, **kwargs: float) -> nn.Module:
    """The seeded eval-mode model `name` (kwargs go to its constructor, e.g. softmax_head's logit_scale)."""
    torch.manual_seed(seed)
    built = ZOO[name].build(**kwargs)  # type: ignore[call-arg]
    built.train()
    rng = np.random.default_rng(seed + 100)
    with torch.no_grad():  # a few batches so BatchNorm's running statistics are real
        for _ in range(3):
            built(*[torch.from_numpy(sample(rng, 32)) for sample in ZOO[name].inputs.values()])
    return built.eval()


def save(name: str, directory: Path, *, seed: int = 0, samples: int = SAMPLES, **kwargs: float) -> ZooFiles:
    """Write `<name>.pt2` (dynamic batch) and `<name>.npz` (inputs and labels) into `directory`."""
    import contextlib
    import io
    import warnings

    module = model(name, seed=seed, **kwargs)
    rng = np.random.default_rng(seed)
    arrays = {arg: sample(rng, samples) for arg, sample in ZOO[name].inputs.items()}
    tensors = {k: torch.from_numpy(v) for k, v in arrays.items()}
    with torch.no_grad():
        out = module(*tensors.values())
    first = out[0] if isinstance(out, tuple) else out
    arrays["labels"] = first.argmax(1).numpy().astype(np.int64)
    batch = torch.export.Dim("batch", min=1, max=1024)
    example = tuple(t[:4] for t in tensors.values())
    with warnings.catch_warnings(), contextlib.redirect_stdout(io.StringIO()):
        warnings.simplefilter("ignore")
        program = torch.export.export(module, example, dynamic_shapes={k: {0: batch} for k in tensors})
    directory.mkdir(parents=True, exist_ok=True)
    tag = name if not kwargs and not seed else f"{name}-{seed}-" + "-".join(f"{k}{v:g}" for k, v in kwargs.items())
    pt2, npz = directory / f"{tag}.pt2", directory / f"{tag}.npz"
    torch.export.save(program, str(pt2))
    np.savez(npz, **arrays)
    return ZooFiles(name, pt2, npz, module)


def export(files: ZooFiles, directory: Path | None = None) -> Path:
    """skewgate's own export of a saved zoo model; asserts that its verdict passes."""
    from skewgate.export.core import export_model

    out = (directory or files.pt2.parent) / f"{files.pt2.stem}.onnx"
    verdict = export_model(model=files.pt2, inputs=files.inputs, out=out)
    assert verdict.status == "pass", f"{files.name}: {verdict.message}"
    return out
