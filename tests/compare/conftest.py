import numpy as np
import pytest

from tests.compare import models


@pytest.fixture(scope="session")
def digits_models(tmp_path_factory):
    """Logistic regressions on the digits, strong (all rows) to weak (80 rows), and their eval file (with a
    `slices` array: digits 0-4 'low', 5-9 'high')."""
    root = tmp_path_factory.mktemp("digits")
    split = models.digits(seed=3)
    np.savez(root / "eval.npz", x=split.eval_x, labels=split.eval_y,
             slices=np.where(split.eval_y < 5, "low", "high"))
    built = {name: models.classifier(root / f"{name}.onnx", split, samples=rows, seed=seed)
             for name, rows, seed in (("strong", 1297, 0), ("strong_other_rows", 1200, 1), ("weak", 80, 0))}
    return built, root / "eval.npz", split
