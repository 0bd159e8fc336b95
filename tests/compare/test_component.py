"""compare_op as KFP sees it: it compiles, and its parameter defaults give exactly `CompareOptions()`."""

import pytest

from skewgate.compare.component import compare_op
from skewgate.compare.run import CompareOptions, options_from_parameters
from tests.support.components import parameter_defaults


def test_compiles_with_the_optionsparameter_defaults(tmp_path):
    defaults = parameter_defaults(compare_op, tmp_path)
    assert defaults.pop("pipeline_run_id") == ""
    assert options_from_parameters(**defaults) == CompareOptions()


@pytest.mark.parametrize(("task", "thresholds", "message"), [
    pytest.param("ranking", "", "one of", id="unknown-task"),
    pytest.param("auto", "accuracy:floor=high", "a number or `none`", id="bad-threshold"),
])
def test_bad_parameters_are_bad_input_when_judging_starts(task, thresholds, message):
    from skewgate.common.errors import InputError

    options = options_from_parameters(alias="champion", task=task, thresholds=thresholds, confidence=0.95,
                                      max_churn=-1.0)
    with pytest.raises(InputError, match=message):
        options.judging()
