"""MMD² with an aggregate RBF kernel (several bandwidths around the median heuristic), in two forms:

- exact: the quadratic-time V-statistic from the full kernel matrix, for samples small enough to afford it;
- random Fourier features (RFF): `φ(x) = sqrt(2/D)·cos(Wx + b)` approximates the same kernel, so MMD² is the
  squared distance between the two mean embeddings — linear time and memory in the number of rows.

Both p-values come from a permutation test run as one matrix product: each row of `S` assigns ±1/n, ∓1/m
weights to the pooled sample, so `S @ Φ` gives every permutation's mean-embedding difference at once (for the
exact form, `(S @ K) · S`). p = (k + 1)/(P + 1), never 0. With a reference profile, whose raw rows are gone, the
RFF p-value comes from the Gaussian limit of the mean difference instead (`gaussian_null_pvalue`).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

BANDWIDTH_FACTORS = (0.5, 1.0, 2.0)
CHUNK_ROWS = 16_384  # rows of features materialised at once: bounds memory at CHUNK_ROWS × D floats


@dataclass(frozen=True)
class RandomFeatures:
    """W (d × D) and b (D): an RFF map for the average of RBF kernels with the given bandwidths."""

    weights: np.ndarray
    offsets: np.ndarray
    bandwidths: tuple[float, ...]

    @classmethod
    def draw(cls, dim: int, bandwidths: tuple[float, ...], *, features: int, seed: int) -> RandomFeatures:
        rng = np.random.default_rng(seed)
        per = max(1, features // len(bandwidths))
        blocks = [rng.normal(scale=1.0 / bw, size=(dim, per)) for bw in bandwidths]
        weights = np.asarray(np.concatenate(blocks, axis=1), dtype=np.float32)
        offsets = np.asarray(rng.uniform(0, 2 * np.pi, size=weights.shape[1]), dtype=np.float32)
        return cls(weights=weights, offsets=offsets, bandwidths=tuple(bandwidths))

    @property
    def size(self) -> int:
        return int(self.weights.shape[1])

    def transform(self, x: np.ndarray) -> np.ndarray:
        z = np.asarray(x, dtype=np.float32) @ self.weights
        z += self.offsets
        np.cos(z, out=z)
        z *= np.float32(np.sqrt(2.0 / self.size))
        return z

    def mean_embedding(self, x: np.ndarray) -> np.ndarray:
        total = np.zeros(self.size, dtype=np.float64)
        for start in range(0, len(x), CHUNK_ROWS):
            total += self.transform(x[start : start + CHUNK_ROWS]).sum(axis=0, dtype=np.float64)
        return total / max(len(x), 1)

    def covariance(self, x: np.ndarray, mean: np.ndarray) -> np.ndarray:
        """Covariance of φ(x) (D × D), accumulated in chunks."""
        acc = np.zeros((self.size, self.size), dtype=np.float64)
        for start in range(0, len(x), CHUNK_ROWS):
            phi = self.transform(x[start : start + CHUNK_ROWS]).astype(np.float64) - mean
            acc += phi.T @ phi
        return acc / max(len(x) - 1, 1)


def median_bandwidth(x: np.ndarray, y: np.ndarray, *, rng: np.random.Generator, sample: int = 1000) -> float:
    """Median pairwise distance of a pooled subsample (the median heuristic); 1.0 if all points coincide."""
    pooled = np.concatenate([x[rng.choice(len(x), min(sample, len(x)), replace=False)],
                             y[rng.choice(len(y), min(sample, len(y)), replace=False)]]).astype(np.float64)
    sq = np.sum(pooled**2, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * pooled @ pooled.T, 0)
    upper = d2[np.triu_indices(len(pooled), k=1)]
    median = float(np.sqrt(np.median(upper))) if upper.size else 0.0
    return median if median > 0 else 1.0


def _sign_matrix(n: int, m: int, permutations: int, rng: np.random.Generator) -> np.ndarray:
    """Row p: +1/n on the rows permutation p calls "reference", −1/m on the rest; row 0 is the identity."""
    rows = np.empty((permutations + 1, n + m), dtype=np.float32)
    base = np.concatenate([np.full(n, 1.0 / n), np.full(m, -1.0 / m)]).astype(np.float32)
    rows[0] = base
    for p in range(1, permutations + 1):
        rows[p] = base[rng.permutation(n + m)]
    return rows


def _pvalue(observed: float, null: np.ndarray) -> float:
    return float((np.sum(null >= observed) + 1) / (null.size + 1))


def mmd_exact(x: np.ndarray, y: np.ndarray, bandwidths: tuple[float, ...], *, permutations: int,
              rng: np.random.Generator) -> tuple[float, float]:
    """Biased (V-statistic) MMD² with the averaged RBF kernel, and its permutation p-value."""
    pooled = np.concatenate([x, y]).astype(np.float64)
    sq = np.sum(pooled**2, axis=1)
    d2 = np.maximum(sq[:, None] + sq[None, :] - 2 * pooled @ pooled.T, 0)
    kernel = np.mean([np.exp(-d2 / (2 * bw**2)) for bw in bandwidths], axis=0)
    signs = _sign_matrix(len(x), len(y), permutations, rng).astype(np.float64)
    stats = np.einsum("pi,pi->p", signs @ kernel, signs)
    return float(stats[0]), _pvalue(stats[0], stats[1:])


def mmd_rff(x: np.ndarray, y: np.ndarray, features: RandomFeatures, *, permutations: int,
            rng: np.random.Generator) -> tuple[float, float]:
    """RFF estimate of the same MMD², and its permutation p-value: one (P+1) × N by N × D product, chunked."""
    n, m = len(x), len(y)
    signs = _sign_matrix(n, m, permutations, rng)
    diffs = np.zeros((permutations + 1, features.size), dtype=np.float64)
    for start in range(0, n + m, CHUNK_ROWS):
        stop = min(start + CHUNK_ROWS, n + m)
        block = np.concatenate([x[start:min(stop, n)] if start < n else x[:0],
                                y[max(start - n, 0):stop - n] if stop > n else y[:0]])
        diffs += signs[:, start:stop] @ features.transform(block)
    stats = np.sum(diffs**2, axis=1)
    return float(stats[0]), _pvalue(stats[0], stats[1:])


def gaussian_null_pvalue(observed: float, covariance: np.ndarray, n: int, m: int, *, draws: int,
                         rng: np.random.Generator) -> float:
    """Under H0 the mean-embedding difference is ≈ N(0, (1/n + 1/m)·Σ), so MMD² ≈ Σ λ_i χ²₁. Monte Carlo
    draws of that weighted sum give the p-value, again as (k + 1)/(draws + 1)."""
    eigenvalues = np.clip(np.linalg.eigvalsh(covariance), 0, None) * (1.0 / n + 1.0 / m)
    null = (rng.standard_normal((draws, eigenvalues.size)) ** 2) @ eigenvalues
    return _pvalue(observed, null)
