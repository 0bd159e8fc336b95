"""The demo: a small CNN trained on scikit-learn's bundled digits, gated through the release-gate pipeline."""
