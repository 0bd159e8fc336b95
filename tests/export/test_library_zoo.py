"""Export on architectures from torchvision, transformers and timm (tests/library_zoo.py): every faithful export
passes — in-place ops, deep stacks and all — and a model left in training mode fails with the module named."""

import pytest

from tests.library_zoo import ZOO


@pytest.mark.parametrize("name", list(ZOO))
def test_faithful_export_of_a_library_model_passes(library_zoo, name):
    _, _, verdict = library_zoo(name)
    assert verdict.status == "pass", verdict.message
    # judged against the program's own float32 rounding, measured on a float64 run of it
    assert verdict.details["rounding"]["method"] == "float64 reference", verdict.details["rounding"]


@pytest.mark.parametrize(
    ("name", "check", "module"),
    [
        pytest.param("resnet18", "lint.batchnorm_eval_mode", "bn1", id="resnet18-batchnorm-train-mode"),
        pytest.param("mobilevit", "lint.batchnorm_eval_mode", "stem.bn", id="mobilevit-batchnorm-train-mode"),
        pytest.param("bert", "lint.dropout_inactive", "bert.embeddings.dropout", id="bert-dropout-active"),
        pytest.param("vit", "lint.dropout_inactive", "encoder.dropout", id="vit-dropout-active"),
    ],
)
def test_a_library_model_left_in_training_mode_fails_with_the_module_named(library_zoo, name, check, module):
    _, _, verdict = library_zoo(name, train=True)
    assert verdict.status == "fail"
    failed = {c.name: c.detail for c in verdict.failed_checks}
    assert module in failed[check], failed[check]
    # and the outputs show it: batch statistics change with the batch, active dropout with every run
    assert {"batch_invariance.torch", "determinism.torch"} & set(failed), sorted(failed)
