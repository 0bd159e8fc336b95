"""The estimate tests' shared data: a binary model whose truth is known (simulation.py) and its data sets."""

import numpy as np
import pytest

from tests.estimate import simulation as sim


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The binary model, a labelled reference of 4000 samples, and current data sets with their true labels."""
    d = tmp_path_factory.mktemp("estimate")
    rng = np.random.default_rng(0)
    found = {"model": sim.binary_model(d / "binary.onnx"), "dir": d}
    x, _, labels = sim.binary(rng, 4000, sim.REFERENCE)
    np.savez(d / "reference.npz", x=x, labels=labels)
    found["reference"] = d / "reference.npz"
    for name, shift, n in [("boundary", sim.INTO_THE_BOUNDARY, 4000), ("ignored", sim.IGNORED_FEATURE, 4000),
                           ("mild", sim.Shift(spread=1.0), 1000), ("wide", sim.Shift(spread=3.0), 4000)]:
        x, logits, labels = sim.binary(rng, n, shift)
        np.savez(d / f"{name}.npz", x=x)
        found[name] = d / f"{name}.npz"
        found[f"{name}_realised"] = float(np.mean(logits.argmax(axis=1) == labels))
    return found
