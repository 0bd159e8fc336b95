"""Model lint on a `torch.export.ExportedProgram`: the defects that make a model behave differently once served.

It reads the exported graph, not Python modules: a `.pt2` carries no `nn.Module` objects, but its nodes keep
the module path (`nn_module_stack`) and the ops keep the training flags they were traced with.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

import numpy as np

from skewgate.common.verdict import Check

if TYPE_CHECKING:
    import torch

# op name → index of its `training` / `train` argument (None: the op only exists in training mode).
_TRAINING_BATCH_NORM = {
    "aten.batch_norm.default": 5,
    "aten._native_batch_norm_legit_functional.default": 5,
    "aten._native_batch_norm_legit.default": 5,
    "aten.native_batch_norm.default": 5,
    "aten.cudnn_batch_norm.default": 5,
}
_DROPOUT = {
    "aten.dropout.default": 2,
    "aten.dropout_.default": 2,
    "aten.feature_dropout.default": 2,
    "aten.alpha_dropout.default": 2,
    "aten.feature_alpha_dropout.default": 2,
    "aten.native_dropout.default": 2,
}


@dataclass(frozen=True)
class GeluUse:
    """Each GELU's approximation (`none` = erf, `tanh`): counted, and by `module:node` site."""

    approximations: Mapping[str, int]
    sites: Mapping[str, str]


def _module_path(node: torch.fx.Node) -> str:
    stack = node.meta.get("nn_module_stack") or {}
    paths = [path for path, _cls in stack.values() if path]
    return paths[-1] if paths else "<root>"


def _flag(node: torch.fx.Node, index: int, keyword: str) -> bool:
    if len(node.args) > index:
        return bool(node.args[index])
    return bool(node.kwargs.get(keyword, False))


def lint_program(program: torch.export.ExportedProgram) -> tuple[list[Check], GeluUse]:
    """Checks for training-mode BatchNorm and Dropout, untouched or non-finite BatchNorm statistics and
    non-finite weights; and the GELUs met on the way."""
    training_bn: list[str] = []
    active_dropout: list[str] = []
    gelus: Counter[str] = Counter()
    gelu_sites: dict[str, str] = {}
    for node in program.graph.nodes:
        if node.op != "call_function":
            continue
        target = str(node.target)
        if target in _TRAINING_BATCH_NORM and _flag(node, _TRAINING_BATCH_NORM[target], "training"):
            training_bn.append(_module_path(node))
        elif target in _DROPOUT and _flag(node, _DROPOUT[target], "train") and _dropout_p(node) > 0:
            active_dropout.append(_module_path(node))
        elif target.startswith("aten.gelu"):
            approx = str(node.kwargs.get("approximate", node.args[1] if len(node.args) > 1 else "none"))
            gelus[approx] += 1
            gelu_sites[f"{_module_path(node)}:{node.name}"] = approx

    state = {name: tensor.detach().cpu().numpy() for name, tensor in program.state_dict.items()}
    state.update({name: t.detach().cpu().numpy() for name, t in (program.constants or {}).items()
                  if hasattr(t, "detach")})
    nonfinite = sorted(name for name, arr in state.items()
                       if arr.dtype.kind in "fc" and not np.isfinite(arr).all())
    untouched, bad_stats = _batch_norm_statistics(state)

    checks = [
        Check("lint.batchnorm_eval_mode", passed=not training_bn, value=len(training_bn), limit=0,
              detail=_listing("BatchNorm traced in training mode (uses batch statistics)", training_bn)),
        Check("lint.dropout_inactive", passed=not active_dropout, value=len(active_dropout), limit=0,
              detail=_listing("Dropout active at inference", active_dropout)),
        Check("lint.batchnorm_stats_trained", passed=not untouched, value=len(untouched), limit=0,
              detail=_listing("running statistics still at their defaults (mean 0, var 1)", untouched)),
        Check("lint.batchnorm_stats_finite", passed=not bad_stats, value=len(bad_stats), limit=0,
              detail=_listing("non-finite or negative running statistics", bad_stats)),
        Check("lint.weights_finite", passed=not nonfinite, value=len(nonfinite), limit=0,
              detail=_listing("NaN/Inf in", nonfinite)),
    ]
    return checks, GeluUse(approximations=dict(gelus), sites=gelu_sites)


def _dropout_p(node: torch.fx.Node) -> float:
    p = node.args[1] if len(node.args) > 1 else node.kwargs.get("p", 0.5)
    return float(p) if isinstance(p, int | float) else 1.0


def _batch_norm_statistics(state: dict[str, np.ndarray]) -> tuple[list[str], list[str]]:
    untouched, bad = [], []
    for name, mean in state.items():
        if not name.endswith("running_mean"):
            continue
        module = name[: -len(".running_mean")]
        var = state.get(f"{module}.running_var")
        if var is None:
            continue
        if not (np.isfinite(mean).all() and np.isfinite(var).all()) or (var < 0).any():
            bad.append(module)
        elif not mean.any() and np.all(var == 1):
            untouched.append(module)
    return untouched, bad


def _listing(what: str, items: list[str]) -> str:
    if not items:
        return "none found"
    return f"{what}: {', '.join(sorted(set(items)))}"
