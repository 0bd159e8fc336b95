import pytest


@pytest.fixture(autouse=True)
def _no_settling(monkeypatch):
    """Unit tests have no concurrent promotions: no wait before the alias read-back."""
    monkeypatch.setattr("skewgate.promote.core.SETTLE_S", 0.0)
