import pytest

from tests.calibrate import models


@pytest.fixture(scope="session")
def calib(tmp_path_factory):
    """Exported models (clean and with planted hazards), a labelled eval set, clean and corrupted calibration."""
    root = tmp_path_factory.mktemp("calibrate")
    paths = {hazard: models.build(root, hazard=hazard, name=hazard)
             for hazard in ("none", "outlier_channels", "fragile_weights", "very_fragile_weights")}
    paths["eval"] = models.labelled_eval(paths["none"], root / "eval.npz")
    paths["eval_fragile"] = models.labelled_eval(paths["fragile_weights"], root / "eval_fragile.npz")
    paths["eval_very_fragile"] = models.labelled_eval(paths["very_fragile_weights"], root / "eval_very_fragile.npz")
    paths["calibration"] = models.calibration_set(root / "calibration.npz")
    paths["corrupted"] = models.calibration_set(root / "corrupted.npz", corrupted=2)
    return paths
