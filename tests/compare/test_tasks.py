"""compare on outputs that are not class scores or one value per sample: a segmentation model judged by pixel
accuracy and mIoU against per-pixel labels, an embedding model by retrieval over the eval set (nearest-neighbour
accuracy, recall@k) against class labels — each passing its equal, blocking its worse, and read from the shapes."""

import numpy as np
import pytest

from skewgate.common.errors import InputError
from tests.compare import models
from tests.compare.test_core import _compare

# digits' pixels are multiples of 1/16: 0.61 and 0.62 split them alike, 0.4 and 0.8 do not
THRESHOLDS = {"exact": (0.27, 0.61), "shifted": (0.27, 0.62), "off": (0.4, 0.8)}


@pytest.fixture(scope="module")
def segmenters(tmp_path_factory):
    root = tmp_path_factory.mktemp("ink")
    images = models.digits(seed=1).eval_x.reshape(-1, 1, 8, 8)
    np.savez(root / "eval.npz", x=images, labels=models.ink_labels(images))
    built = {name: models.ink_segmenter(root / f"{name}.onnx", *bounds) for name, bounds in THRESHOLDS.items()}
    return built, root / "eval.npz"


@pytest.mark.parametrize(("candidate", "champion", "status"), [
    pytest.param("exact", "shifted", "pass", id="same-pixels-passes"),
    pytest.param("off", "exact", "fail", id="worse-thresholds-fail"),
])
def test_a_segmentation_model_is_judged_by_pixel_accuracy_and_miou(segmenters, candidate, champion, status):
    built, data = segmenters
    verdict = _compare(built[candidate], built[champion], data)
    assert verdict.details["task"] == "segmentation" and verdict.details["metrics"] == ["pixel_accuracy", "miou"]
    assert verdict.status == status, verdict.message
    if status == "fail":
        failed = {c.name for c in verdict.failed_checks}
        assert {"pixel_accuracy.vs_champion", "miou.vs_champion"} <= failed
    images = np.load(data)["x"]
    changed = models.ink_labels(images, *THRESHOLDS[candidate]) != models.ink_labels(images, *THRESHOLDS[champion])
    churn = verdict.check("churn")
    assert "pixels change their class" in churn.detail and churn.value == pytest.approx(changed.mean())


def test_per_pixel_labels_that_fit_no_output_name_the_shapes(segmenters, tmp_path):
    built, data = segmenters
    arrays = dict(np.load(data))
    np.savez(tmp_path / "eval.npz", x=arrays["x"], labels=arrays["labels"][:, :, :4])  # half the width
    shapes = r"labels int64\[\d+, 8, 4\], output float32\[\d+, 3, 8, 8\]"
    with pytest.raises(InputError, match=r"one label per pixel.*" + shapes):
        _compare(built["exact"], None, tmp_path / "eval.npz")


@pytest.fixture(scope="module")
def embedders(tmp_path_factory):
    root = tmp_path_factory.mktemp("embed")
    split = models.digits(seed=2)
    np.savez(root / "eval.npz", x=split.eval_x, labels=split.eval_y)
    trained = models.discriminant(split, 9)
    rng = np.random.default_rng(0)
    built = {"trained": models.embedder(root / "trained.onnx", trained),
             # the same directions, nudged: retrieval as good within the noise
             "nudged": models.embedder(root / "nudged.onnx", trained * (1 + 0.01 * rng.normal(size=trained.shape))),
             "random": models.embedder(root / "random.onnx", rng.normal(size=trained.shape))}
    return built, root / "eval.npz"


@pytest.mark.parametrize(("candidate", "champion", "status"), [
    pytest.param("nudged", "trained", "pass", id="equal-retrieval-passes"),
    pytest.param("random", "trained", "fail", id="untrained-projection-fails"),
])
def test_an_embedding_model_is_judged_by_retrieval(embedders, candidate, champion, status):
    built, data = embedders
    verdict = _compare(built[candidate], built[champion], data)  # unit rows: read as an embedding
    assert verdict.details["task"] == "embedding" and verdict.details["metrics"] == ["nn_accuracy", "recall_at_k"]
    assert verdict.status == status, verdict.message
    row = next(r for r in verdict.details["table"] if r["metric"] == "nn_accuracy")
    assert row["champion"] > 0.9  # the discriminant directions retrieve the digit
    if status == "fail":
        assert "nn_accuracy.vs_champion" in {c.name for c in verdict.failed_checks}
        assert row["candidate"] < row["champion"] - 0.1
    assert "change their nearest neighbour" in verdict.check("churn").detail


def test_an_embedding_declared_as_a_classifier_is_judged_as_one_and_refused(embedders):
    """`--task` wins over the shapes: 9 values per sample read as class scores cannot hold digits 0-9, and
    that is bad input naming the labels, not a retrieval judgement the user did not ask for."""
    built, data = embedders
    with pytest.raises(InputError, match=r"labels: expected class indices in \[0, 9\), found values in \[0, 9\]"):
        _compare(built["trained"], None, data, task="classification")
