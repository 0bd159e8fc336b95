from skewgate.probe.component import triton_probe_op
from skewgate.probe.run import ProbeOptions
from tests.support.components import parameter_defaults


def test_compiles_with_the_options_defaults(tmp_path):
    defaults = parameter_defaults(triton_probe_op, tmp_path)
    assert defaults["protocol"] == ProbeOptions().protocol
    assert defaults["experiment"] == ""  # the model's name, as the other gates record under
    options = ProbeOptions()
    assert (defaults["stream"], defaults["states"], defaults["max_sequences"]) == (
        options.stream, "", options.max_sequences)
