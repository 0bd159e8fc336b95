"""Preprocessing callables for the preprocess-parity tests (imported by `module:function`)."""

import numpy as np


def train(raw: np.ndarray) -> np.ndarray:
    return (raw / 16.0).astype(np.float32)


def serve_same(raw: np.ndarray) -> np.ndarray:
    return (raw * (1 / 16.0)).astype(np.float32)


def serve_unscaled(raw: np.ndarray) -> np.ndarray:
    return raw.astype(np.float32)  # forgot to divide by 16


def serve_augmented(raw: np.ndarray) -> np.ndarray:
    noise = np.random.default_rng().normal(scale=0.01, size=raw.shape)  # left on at inference
    return (raw / 16.0 + noise).astype(np.float32)
