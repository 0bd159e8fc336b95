import json
from types import SimpleNamespace

import numpy as np

from skewgate.preprocess.component import preprocess_op


class _Metrics:
    def log_metric(self, name, value):
        pass


def test_the_component_body_blocks_serving_that_forgot_to_scale(tmp_path):
    np.savez(tmp_path / "raw.npz", images=np.arange(24.0).reshape(6, 4))
    out = {n: SimpleNamespace(path=str(tmp_path / n), metadata={}) for n in ("verdict", "report", "attestation")}
    status = preprocess_op.python_func(raw_data=SimpleNamespace(path=str(tmp_path / "raw.npz")),
                                       train_fn="tests.preprocess.preprocessing_fns:train",
                                       serve_fn="tests.preprocess.preprocessing_fns:serve_unscaled",
                                       verdict=out["verdict"], metrics=_Metrics(), report=out["report"],
                                       attestation=out["attestation"])
    assert status == "fail"
    assert json.loads((tmp_path / "verdict").read_text())["checks"][-1]["name"] == "preprocess_match"
