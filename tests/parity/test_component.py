"""parity_op as KFP compiles it: its defaults are `ParityOptions`'s, but for `layerwise` (on in the pipeline:
promote's evidence names the first diverging layer)."""

from skewgate.parity.component import parity_op
from skewgate.parity.core import ParityOptions
from tests.support.components import parameter_defaults


def test_compiles_with_the_options_defaults(tmp_path):
    defaults = parameter_defaults(parity_op, tmp_path)
    assert defaults.pop("layerwise") is True and ParityOptions().layerwise is False
    assert defaults == {"triton_url": "", "triton_model": "", "fp16": False, "tracking_uri": "",
                        "experiment": "skewgate", "pipeline_run_id": "", "states": ""}
