"""Sources of randomness for the private mechanisms.

DEVELOPERS invariant 4: noise (and the Poisson draws and random splits, which the privacy
analysis also treats as secret) comes from the operating system's CSPRNG unless a seed is
given. A seeded source is a NumPy PCG64 generator, reproducible and therefore predictable:
it warns that the model is for testing only.

The secure source turns 53 random bits from ``os.urandom`` into a uniform in (0, 1) and
Gaussians by the inverse normal CDF (``scipy.special.ndtri``). Its normal tails end near
8.3 standard deviations; no floating-point hardening (Mironov 2012) is attempted beyond that.
"""

from __future__ import annotations

import os
import warnings

import numpy as np
from scipy.special import ndtri

from renyiboost.exceptions import TestingOnlyWarning


class NoiseSource:
    """Uniforms, Gaussians, Bernoulli draws and choices from one generator."""

    seeded: bool = False

    def uniform(self, size: int) -> np.ndarray:
        raise NotImplementedError

    def normal(self, size: int, std: float | np.ndarray = 1.0) -> np.ndarray:
        return ndtri(self.uniform(size)) * std

    def laplace(self, size: int, scale: float) -> np.ndarray:
        """Laplace draws by inversion of the CDF: −b·sign(u)·ln(1 − 2|u|), u ∈ (−½, ½)."""
        u = self.uniform(size) - 0.5
        return -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))

    def bernoulli(self, probability: float, size: int) -> np.ndarray:
        if probability >= 1.0:
            return np.ones(size, dtype=bool)
        return self.uniform(size) < probability

    def uniform_between(self, low: float, high: float) -> float:
        return float(low + (high - low) * self.uniform(1)[0])

    def choice(self, n: int) -> int:
        """A uniform integer in ``[0, n)``."""
        return min(int(self.uniform(1)[0] * n), n - 1)

    def get_state(self) -> dict | None:
        """State to persist so a resumed seeded run continues the same draws (None: CSPRNG)."""
        return None

    def set_state(self, state: dict | None) -> None:
        """Restore :meth:`get_state`'s value; a CSPRNG has nothing to restore."""


class SecureNoise(NoiseSource):
    """Randomness from ``os.urandom`` (the operating system's CSPRNG)."""

    def uniform(self, size: int) -> np.ndarray:
        words = np.frombuffer(os.urandom(8 * size), dtype=np.uint64)
        return ((words >> np.uint64(11)).astype(np.float64) + 0.5) / 2.0**53


class SeededNoise(NoiseSource):
    """Reproducible randomness for tests and experiments; *not* private."""

    seeded = True

    def __init__(self, seed: int | np.random.SeedSequence) -> None:
        self._rng = np.random.default_rng(seed)

    def uniform(self, size: int) -> np.ndarray:
        return self._rng.random(size)

    def normal(self, size: int, std: float | np.ndarray = 1.0) -> np.ndarray:
        return self._rng.standard_normal(size) * std

    def get_state(self) -> dict | None:
        return self._rng.bit_generator.state

    def set_state(self, state: dict | None) -> None:
        if state is not None:
            self._rng.bit_generator.state = state


def noise_source(seed: int | np.random.SeedSequence | None, *, warn: bool = True) -> NoiseSource:
    """The CSPRNG for ``seed=None``, else a seeded generator that warns it is test-only."""
    if seed is None:
        return SecureNoise()
    if warn:
        warnings.warn(
            f"seed={seed!r}: the noise is reproducible and predictable, so this model is for "
            "testing only and carries no privacy guarantee. Use seed=None in production.",
            TestingOnlyWarning,
            stacklevel=3,
        )
    return SeededNoise(seed)
