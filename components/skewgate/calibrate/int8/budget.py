"""The accuracy-budget loop: while the deployed drop exceeds the budget, keep in FP32 what the evidence points at
(fallback.py) and judge the written file again.

Per trial only what the trial changes is redone: the quantiser writes a new file (its model prepared once, see
`Quantizer`) and ONNX Runtime judges it against the FP32 reference, whose outputs were computed once per run."""

from __future__ import annotations

import logging
import shutil
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from skewgate.calibrate.int8.evaluate import Evaluation, Layerwise, Reference, judge
from skewgate.calibrate.int8.fallback import candidates
from skewgate.calibrate.int8.quantize import Quantizer

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Budget:
    max_drop: float  # accuracy points with labels, else the share of positions harmed (1 − agreement)
    min_agreement: float  # the share of positions left unharmed, as `parity --int8` judges it
    max_candidates: int  # candidates probed on their own (layers, op groups, 7-bit weights)
    batch_size: int

    def shortfall(self, result: Evaluation) -> float:
        """How far `result` is from the budget, in shares of the eval set (≤ 0: met): the worse of its two
        limits, so that a trial is kept only if it brings the one that decides closer."""
        return max(result.drop - self.max_drop, self.min_agreement - result.agreement)

    def met(self, result: Evaluation) -> bool:
        return self.shortfall(result) <= 1e-9  # 2 of 200 samples is a drop of 0.01, not 0.010000000000000009


@dataclass
class BestTrial:
    """The best model found: its evaluation, the nodes it keeps in FP32, and whether it has 7-bit weights."""

    result: Evaluation
    excluded: list[str] = field(default_factory=list)
    reduce_range: bool = False


def trial_row(index: int, excluded: list[str], result: Evaluation, *, tried: str, kept: bool,
              reduce_range: bool = False) -> dict[str, Any]:
    """One row of `details.trials` (and the MLflow trials table)."""
    return {"trial": index, "tried": tried, "excluded": list(excluded), "reduce_range": reduce_range, "kept": kept,
            "drop": result.drop,
            "accuracy_fp32": result.accuracy_fp32, "accuracy_int8": result.accuracy_int8,
            "agreement": result.agreement, "top1_agreement": result.logits.get("top1_agreement"),
            "kl_divergence": result.logits.get("kl_divergence")}


def budget_loop(quantizer: Quantizer, ref: Reference, feeds: dict[str, np.ndarray], first: Evaluation,
                view: Layerwise, out: Path, trials: list[dict[str, Any]], budget: Budget) -> BestTrial:
    """Probe each candidate (fallback.py) on its own, then combine those that helped, best first, keeping each
    only if it lowers the deployed drop further (a greedy walk alone is myopic: 7-bit weights can help a little
    and then hide that one layer in FP32 helps a lot). Stops as soon as the budget is met; `out` always holds
    the best model so far. Appends one row per trial to `trials`."""
    prepared = quantizer.prepared
    ops = set(quantizer.op_types)
    quantizable = {n.name: n.op_type for n in prepared.graph.node if n.op_type in ops and n.name}
    found = candidates(prepared, view.layers, quantizable, fused_gap=first.drop - view.drop)
    found = found[: budget.max_candidates]
    best = BestTrial(first)
    with tempfile.TemporaryDirectory(prefix="skewgate-calibrate-") as tmp:

        def attempt(excluded: list[str], reduce_range: bool, tried: str) -> float:
            path = quantizer.write(Path(tmp) / "trial.onnx", exclude=excluded, reduce_range=reduce_range)
            result = judge(ref, path, feeds, batch_size=budget.batch_size)
            helped = budget.shortfall(result) < budget.shortfall(best.result)
            trials.append(trial_row(len(trials), excluded, result, tried=tried, kept=helped,
                                    reduce_range=reduce_range))
            log.info("trial %d: %s → drop %.4f, agreement %.4f", len(trials) - 1, tried, result.drop,
                     result.agreement)
            if helped:
                best.result, best.excluded, best.reduce_range = result, excluded, reduce_range
                shutil.copyfile(path, out)
            return budget.shortfall(result)

        probes = {}
        for candidate in found:
            probes[candidate] = attempt(list(candidate.nodes), candidate.reduce_range,
                                        f"{candidate.label} ({candidate.why})")
            if budget.met(best.result):
                return best
        helpful = sorted((c for c in found if probes[c] < budget.shortfall(first)), key=lambda c: probes[c])
        if helpful:
            excluded, reduce_range, short = list(helpful[0].nodes), helpful[0].reduce_range, probes[helpful[0]]
            for candidate in helpful[1:]:
                more = [*excluded, *candidate.nodes], reduce_range or candidate.reduce_range
                tried = f"{candidate.label} on top of {helpful[0].label}" + (" and more" if excluded != list(
                    helpful[0].nodes) or reduce_range != helpful[0].reduce_range else "")
                now = attempt(*more, tried)
                if now < short:
                    (excluded, reduce_range), short = more, now
                if budget.met(best.result):
                    break
    return best
