"""The estimate tests' shared data: a binary model whose truth is known (simulation.py) and its data sets."""

import pytest

from tests.estimate import simulation as sim


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The binary model, a labelled reference of 4000 samples, and current data sets with their true labels."""
    return sim.known_truth_files(tmp_path_factory.mktemp("estimate"))
