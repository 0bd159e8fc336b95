"""Architectures from the libraries people ship with — torchvision, Hugging Face transformers, timm — at random
init and small sizes, saved as skewgate takes them: `<name>.pt2` (dynamic batch) and `<name>.npz`.

Nothing is downloaded: every model is built from its class or config. The torchvision wheel that matches
torch 2.13 is CUDA-linked, and `import torchvision` registers fake kernels for its C++ ops (`torchvision::nms`),
which fails beside a CPU-only torch. Its model code is pure Python and needs none of those ops, so where the
package does not import, `torchvision_models()` loads `torchvision.models` without running the package's
`__init__` (timm imports torchvision too, so it goes through the same door).
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

SAMPLES = 12
# Hugging Face's default init (0.02) leaves activations near zero, where an erf and a tanh GELU agree to 1e-5;
# trained BERTs feed their GELUs values of standard deviation ~1, which this init gives
INIT_RANGE = 0.2


def torchvision_models() -> Any:
    """`torchvision.models`, imported with or without the package's C++ op registrations (see above)."""
    try:
        import torchvision.models as models

        return models
    except (RuntimeError, ImportError):
        spec = importlib.util.find_spec("torchvision")
        if spec is None or not spec.submodule_search_locations:
            raise
        for name in [m for m in sys.modules if m == "torchvision" or m.startswith("torchvision.")]:
            del sys.modules[name]  # the half-imported package
        package = types.ModuleType("torchvision")
        package.__path__ = list(spec.submodule_search_locations)
        package.__spec__ = spec
        sys.modules["torchvision"] = package
        return importlib.import_module("torchvision.models")


def _timm(name: str, **kwargs: Any) -> nn.Module:
    torchvision_models()  # timm imports torchvision: through the same door
    import timm

    return timm.create_model(name, pretrained=False, **kwargs)


class _Bert(nn.Module):
    """A 2-layer BERT encoder over token ids and a padding mask → every position's hidden state."""

    def __init__(self, dropout: float = 0.1) -> None:
        super().__init__()
        torchvision_models()  # transformers imports torchvision where it is installed: through the same door
        from transformers import BertConfig, BertModel

        config = BertConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                            intermediate_size=64, max_position_embeddings=32, hidden_dropout_prob=dropout,
                            attention_probs_dropout_prob=dropout, hidden_act="gelu", initializer_range=INIT_RANGE)
        self.bert = BertModel(config, add_pooling_layer=False)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.bert(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state


class _Gpt2(nn.Module):
    """A 2-layer GPT-2 decoder (causal mask) over token ids → next-token logits at every position."""

    def __init__(self) -> None:
        super().__init__()
        torchvision_models()
        from transformers import GPT2Config, GPT2LMHeadModel

        config = GPT2Config(vocab_size=120, n_positions=32, n_embd=32, n_layer=2, n_head=4,
                            initializer_range=INIT_RANGE)
        self.gpt = GPT2LMHeadModel(config)

    def forward(self, input_ids: torch.Tensor) -> torch.Tensor:
        return self.gpt(input_ids=input_ids, use_cache=False).logits


class _Llama(nn.Module):
    """A 2-layer Llama decoder (rotary positions, RMSNorm, SiLU-gated MLP, grouped-query attention over a padding
    mask) → next-token logits at every position: the exporter computes the mask once for both layers."""

    def __init__(self) -> None:
        super().__init__()
        torchvision_models()
        from transformers import LlamaConfig, LlamaForCausalLM

        config = LlamaConfig(vocab_size=120, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                             num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=32,
                             initializer_range=INIT_RANGE)
        self.llama = LlamaForCausalLM(config)

    def forward(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> torch.Tensor:
        return self.llama(input_ids=input_ids, attention_mask=attention_mask, use_cache=False).logits


def _swin() -> nn.Module:
    """A 2-stage Swin transformer: shifted windows, whose attention mask PyTorch builds from a shape
    (`x.new_zeros`) and ONNX holds as a constant."""
    torchvision_models()
    from torchvision.models.swin_transformer import SwinTransformer

    return SwinTransformer(patch_size=[4, 4], embed_dim=16, depths=[2, 2], num_heads=[2, 2], window_size=[4, 4],
                           num_classes=10)


class _Lraspp(nn.Module):
    """LR-ASPP on a MobileNetV3 backbone: class scores per pixel, N×5×H×W (class axis 1, not the last)."""

    def __init__(self) -> None:
        super().__init__()
        self.net = torchvision_models().segmentation.lraspp_mobilenet_v3_large(weights=None, weights_backbone=None,
                                                                               num_classes=5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.net(x)["out"]


class _ClipVision(nn.Module):
    """A CLIP-style image tower: a 2-layer ViT (quick GELU) → projection → the L2-normalised embedding retrieval
    compares by cosine (rows of unit norm: what `--task auto` reads as an embedding)."""

    def __init__(self) -> None:
        super().__init__()
        torchvision_models()
        from transformers import CLIPVisionConfig, CLIPVisionModelWithProjection

        config = CLIPVisionConfig(hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                                  image_size=32, patch_size=8, projection_dim=16, initializer_range=INIT_RANGE)
        self.clip = CLIPVisionModelWithProjection(config)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return nn.functional.normalize(self.clip(pixel_values=x).image_embeds, dim=-1)


def _tokens(rng: np.random.Generator) -> dict[str, np.ndarray]:
    ids = rng.integers(1, 120, size=(SAMPLES, 16)).astype(np.int64)
    mask = np.ones_like(ids)
    for row, length in enumerate(rng.integers(6, 17, size=SAMPLES)):
        mask[row, length:] = 0  # right padding, as a tokenizer pads a batch
        ids[row, length:] = 0
    return {"input_ids": ids, "attention_mask": mask}


def _images(size: int) -> Callable[[np.random.Generator], dict[str, np.ndarray]]:
    return lambda rng: {"x": rng.normal(size=(SAMPLES, 3, size, size)).astype(np.float32)}


@dataclass(frozen=True)
class LibraryModel:
    build: Callable[[], nn.Module]
    inputs: Callable[[np.random.Generator], dict[str, np.ndarray]]
    library: str
    classifier: bool = True  # logits out: the last Linear is scaled so they spread like a trained model's


ZOO: dict[str, LibraryModel] = {
    # ReLU(inplace=True) throughout, and the residual add_ in every block
    "resnet18": LibraryModel(lambda: torchvision_models().resnet18(), _images(96), "torchvision"),
    "shufflenet": LibraryModel(lambda: torchvision_models().shufflenet_v2_x0_5(), _images(64), "torchvision"),
    "vit": LibraryModel(lambda: torchvision_models().VisionTransformer(
        image_size=32, patch_size=8, num_layers=2, num_heads=4, hidden_dim=32, mlp_dim=64, num_classes=10,
        dropout=0.1),
        _images(32), "torchvision"),
    "bert": LibraryModel(_Bert, lambda rng: _tokens(rng), "transformers", classifier=False),
    "gpt2": LibraryModel(_Gpt2, lambda rng: {"input_ids": _tokens(rng)["input_ids"]}, "transformers",
                         classifier=False),
    "llama": LibraryModel(_Llama, lambda rng: _tokens(rng), "transformers", classifier=False),
    "swin": LibraryModel(_swin, _images(32), "torchvision"),
    "lraspp": LibraryModel(_Lraspp, _images(64), "torchvision", classifier=False),  # segmentation
    "clip_vision": LibraryModel(_ClipVision, _images(32), "transformers", classifier=False),  # an embedding
    # layer scale ×1e-6 and SiLU / GELU; MobileViT: BatchNorm, SiLU(inplace=True), attention over patches
    "convnext": LibraryModel(lambda: _timm("convnext_atto", num_classes=10), _images(64), "timm"),
    "mobilevit": LibraryModel(lambda: _timm("mobilevit_xxs", num_classes=10), _images(64), "timm"),
}


def _spread_logits(model: nn.Module, tensors: dict[str, torch.Tensor], spread: float = 10.0) -> None:
    """Scale the last Linear so the logits' standard deviation is `spread`, as a trained classifier's are (random
    init leaves them near ±0.5). Float32 rounding grows with them: this is where one-op tolerances misfire."""
    head = [m for m in model.modules() if isinstance(m, nn.Linear)][-1]
    with torch.no_grad():
        if not head.weight.any():  # torchvision's ViT starts its head at zero
            nn.init.normal_(head.weight, std=0.02)
        std = float(model(*tensors.values()).std())
        head.weight.mul_(spread / std)
        head.bias.mul_(spread / std)


@dataclass(frozen=True)
class Files:
    pt2: Path
    inputs: Path

    @classmethod
    def of(cls, name: str, directory: Path, *, train: bool = False) -> Files:
        """Where `save` writes `name` in `directory` (the training-mode program under its own name)."""
        return cls(directory / f"{name}{'_train' if train else ''}.pt2", directory / f"{name}.npz")


def save(name: str, directory: Path, *, seed: int = 0, train: bool = False) -> Files:
    """Build `name` (seeded), run a few batches in training mode so BatchNorm statistics are real, then save it
    in eval mode — or, with `train`, left in training mode (BatchNorm on batch statistics, Dropout active)."""
    entry = ZOO[name]
    torch.manual_seed(seed)
    model = entry.build()
    feeds = entry.inputs(np.random.default_rng(seed))
    tensors = {k: torch.from_numpy(v) for k, v in feeds.items()}
    model.train()
    with torch.no_grad():
        for _ in range(2):
            model(*tensors.values())
    model.eval()
    if entry.classifier:
        _spread_logits(model, tensors)
    model.train(train)
    batch = torch.export.Dim("batch", min=1, max=1024)
    example = tuple(t[:4] for t in tensors.values())  # positional, in forward's order, as users export
    program = torch.export.export(model, example, dynamic_shapes={k: {0: batch} for k in tensors})
    directory.mkdir(parents=True, exist_ok=True)
    files = Files.of(name, directory, train=train)
    torch.export.save(program, str(files.pt2))
    np.savez(files.inputs, **feeds)
    return files
