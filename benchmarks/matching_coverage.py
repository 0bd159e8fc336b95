"""How many of a transformer's values layerwise parity pairs, and how many ONNX values it leaves with no twin: the
zoo's Llama and Swin and a 2-layer RoBERTa, random init, each exported by `skewgate export` and judged by
`parity --layerwise` (docs/steps.md, "Shared values").

    .venv/bin/python benchmarks/matching_coverage.py [--workdir DIR]
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def _roberta() -> object:
    from tests.library_zoo import INIT_RANGE, torchvision_models
    from torch import nn

    torchvision_models()
    from transformers import RobertaConfig, RobertaModel

    class Roberta(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            config = RobertaConfig(vocab_size=120, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                                   intermediate_size=64, max_position_embeddings=40, initializer_range=INIT_RANGE)
            self.roberta = RobertaModel(config, add_pooling_layer=False)

        def forward(self, input_ids, attention_mask):  # type: ignore[no-untyped-def]
            return self.roberta(input_ids=input_ids, attention_mask=attention_mask).last_hidden_state

    return Roberta()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workdir", type=Path, help="where the models go (default: a temporary folder)")
    args = parser.parse_args()
    from tests import library_zoo

    library_zoo.ZOO["roberta"] = library_zoo.LibraryModel(_roberta, library_zoo.ZOO["bert"].inputs, "transformers",
                                                          classifier=False)
    from skewgate.export.core import export_model
    from skewgate.parity.core import ParityOptions, parity

    workdir = args.workdir or Path(tempfile.mkdtemp(prefix="skewgate-matching-"))
    print(f"{'model':8} {'paired':>6} {'no twin':>7} {'removed':>7} {'merged':>6}")
    for name in ("llama", "roberta", "swin"):
        files = library_zoo.save(name, workdir)
        onnx_path = files.pt2.with_suffix(".onnx")
        if not onnx_path.exists():
            export_model(model=files.pt2, inputs=files.inputs, out=onnx_path)
        result = parity(torch_model=files.pt2, onnx=onnx_path, inputs=files.inputs,
                        options=ParityOptions(layerwise=True, batch_size=6))
        coverage = result.verdict.details["torch_vs_fp32"]["coverage"]
        no_twin = coverage["unmatched_by_reason"].get("no twin", 0)
        print(f"{name:8} {coverage['matched']:6d} {no_twin:7d} {len(coverage['removed_by_optimisation']):7d} "
              f"{len(coverage['merged_into_twin']):6d}", flush=True)


if __name__ == "__main__":
    main()
