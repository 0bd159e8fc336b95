"""compare_op's parameters as options (tests/test_step_contract.py holds their defaults to `CompareOptions`'s):
bad ones are bad input when judging starts."""

import pytest

from skewgate.compare.run import options_from_parameters


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
