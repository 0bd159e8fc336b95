import numpy as np
import pytest

from tests.export.models import INPUT, examples, save_variant


@pytest.fixture(scope="session")
def pt2(tmp_path_factory):
    """pt2("good") → path of a saved .pt2 of that variant (built once per session)."""
    directory = tmp_path_factory.mktemp("pt2")
    cache = {}

    def get(variant):
        if variant not in cache:
            cache[variant] = save_variant(variant, directory)
        return cache[variant]

    return get


@pytest.fixture(scope="session")
def example_npz(tmp_path_factory):
    path = tmp_path_factory.mktemp("data") / "examples.npz"
    np.savez(path, **{INPUT: examples(12)})
    return path
