"""Sources of randomness for the private mechanisms.

DEVELOPERS invariant 6: noise (and the Poisson draws and random splits, which the privacy
analysis also treats as secret) comes from a cryptographically secure generator unless a
seed is given. A seeded source is a NumPy PCG64 generator, reproducible and therefore
predictable: it warns that the model is for testing only.

The secure source is a **ChaCha20 keystream keyed from the operating system** (32 bytes of
``os.urandom``, a fresh key every :data:`REKEY_BYTES` and in every forked child). Why that is
a CSPRNG: ChaCha20 is a pseudo-random function of its 256-bit key (Bernstein 2008; RFC 8439),
so its keystream under a uniformly random secret key is computationally indistinguishable
from uniform bytes, and nobody who lacks the key can predict the next block from the past
ones. It is the construction the Linux kernel's ``getrandom`` itself uses to stretch its
entropy pool (``drivers/char/random.c``, since Linux 4.8), and OpenBSD's ``arc4random``.
Drawing it through the ``cryptography`` package (OpenSSL's vectorised ChaCha20) gives about
5 GB/s on one core, where ``os.urandom`` gave 0.3 GB/s here (80 MB: 15 ms vs 242 ms), so
production noise no longer costs more than seeded noise. Forward secrecy between rekeys is
not needed: the key lives only in this process's memory, like the noise it produces.

Uniforms (sampling, tree shapes, choices) are ``(2j + 1)·2⁻⁵³`` for the top 52 bits ``j`` of
a 64-bit word: odd multiples of 2⁻⁵³, in (0, 1), never 0 or 1.

**Noise on floating-point numbers** (Mironov, "On significance of the least significant bits
for differential privacy", CCS 2012). Noise drawn as a function of such a uniform takes at
most 2⁵³ values, spaced far apart in the tails, and ``f(D) + Z`` then has a support that
moves with ``f(D)``: a released value can be impossible under a neighbouring data set, an
infinite privacy loss. A read-only audit measured it here on one noisy leaf sum (σ = 2.76):
48 % of the releases ruled the neighbour out. Two measures close it:

* Gaussian and Laplace noise is drawn from a *dense* uniform in (0, ½): every double of
  ``[2⁻¹⁰²², ½)``, each with the probability of the width it stands for (a 52-bit mantissa
  under an exponent read from as many random bits as it takes; ``P(u < x) = 2x`` at every
  such double), turned into a magnitude by the inverse CDF of the lower half (``ndtri(u)``;
  ``−b·ln(2u)``) and given a random sign. Near ``u`` the uniforms are spaced ``u·2⁻⁵²``, so
  the noise's resolution is relative everywhere, and its tails end at 37.5 standard
  deviations or 707 Laplace scales (they ended at 8.3 and 36.7); the mass beyond, 2⁻¹⁰²¹,
  is read as the last binade's.
* Every released noisy value is rounded to a grid of :data:`NOISE_GRID_SHARE` of its noise
  scale (:meth:`NoiseSource.add_gaussian`, :meth:`NoiseSource.add_laplace`). The sum
  ``f(D) + Z`` is rounded to a double first, so the release is a fixed function (that
  rounding, then :func:`snap`) of the ideal ``f(D) + Z``: post-processing of the ideal
  mechanism, up to how far the sampler's law is from the ideal over each set of noise
  values that gives one release. A grid cell of ``σ/64`` holds about ``2⁴⁵·max(1, |z|)`` of
  the dense uniforms' values at ``z`` standard deviations, so that distance is set by
  ``ndtri``'s own accuracy: counted exactly, cell by cell, in ``tests/test_randomness.py``,
  at most 6.2e-13 relative across ±12σ (4.5e-13 for Laplace), and a review measured the
  privacy loss of a release within 1.1e-12 of the ideal's for values up to 2⁴⁷. Beyond the
  tails' end, a mass of 2⁻¹⁰²¹ per draw, an output can be possible under one value and not
  the other: a δ of that size per draw, which the accounting does not carry. The rounding
  adds ``1/49,152`` of the noise's variance.

Seeded sources (tests only) draw their Gaussians with numpy's ziggurat and round the same way.
"""

from __future__ import annotations

import math
import numbers
import os
import warnings

import numba
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy.special import ndtri

from renyiboost.exceptions import TestingOnlyWarning, outside_stacklevel

#: The grid of a released noisy value, as a share of its noise's scale (a power of two, so
#: ``scale · share`` is exact); see the module docstring.
NOISE_GRID_SHARE = 2.0**-6


def snap(values: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """``values`` rounded to the nearest multiple of ``scale · NOISE_GRID_SHARE`` (elementwise
    for an array of scales; a scale of 0, no noise, leaves the value as it is). A scale
    that is negative or not finite is refused; ``+ 0.0`` makes a −0.0 (a value just below
    0 rounded up) the 0.0 of its cell, so the sign bit says nothing more."""
    grid = np.asarray(scale, dtype=float) * NOISE_GRID_SHARE
    if not (np.isfinite(grid).all() and (grid >= 0).all()):
        raise ValueError(f"a noise scale must be finite and >= 0, got {scale!r}")
    if grid.ndim == 0:
        return (np.round(values / grid) * grid + 0.0 if grid > 0
                else np.asarray(values, dtype=float))
    safe = np.where(grid > 0, grid, 1.0)
    return np.where(grid > 0, np.round(values / safe) * safe + 0.0, values)


def gaussian_of(u: np.ndarray, sign: np.ndarray, std: float | np.ndarray) -> np.ndarray:
    """The Gaussian of std ``std`` whose lower-half quantile is ``u`` ∈ (0, ½), signed."""
    return sign * ndtri(u) * std


def laplace_of(u: np.ndarray, sign: np.ndarray, scale: float | np.ndarray) -> np.ndarray:
    """The Laplace draw of scale ``b`` from ``u`` ∈ (0, ½): ``±b·ln(2u)`` (``2u`` is uniform
    on (0, 1), so ``−b·ln(2u)`` is exponential)."""
    return sign * scale * np.log(2.0 * u)


class NoiseSource:
    """Uniforms, Gaussians, Bernoulli draws and choices from one generator."""

    seeded: bool = False

    def add_gaussian(self, values: np.ndarray | float, std: float | np.ndarray) -> np.ndarray:
        """A release of ``values`` with Gaussian noise of std ``std`` (elementwise), rounded
        to its grid (:func:`snap`): the one way a mechanism adds Gaussian noise."""
        values = np.asarray(values, dtype=float)
        return snap(values + self.normal(values.size, std if np.ndim(std) == 0 else
                                         np.ravel(std)).reshape(values.shape), std)

    def add_laplace(self, values: np.ndarray | float, scale: float) -> np.ndarray:
        """A release of ``values`` with Laplace noise of scale ``scale``, rounded to its grid."""
        values = np.asarray(values, dtype=float)
        return snap(values + self.laplace(values.size, scale).reshape(values.shape), scale)

    def uniform(self, size: int) -> np.ndarray:
        raise NotImplementedError

    def uniform_into(self, out: np.ndarray) -> np.ndarray:
        """Fill the float64 array ``out`` with the next ``out.size`` uniforms (the draws
        ``uniform(out.size)`` would give); a caller that reuses ``out`` every round spares
        fresh pages of memory (a round at 10⁷ records drew 80 MB of them)."""
        out[:] = self.uniform(out.size)
        return out

    def normal(self, size: int, std: float | np.ndarray = 1.0) -> np.ndarray:
        """``size`` Gaussians of std ``std``: each source says how (a secure one from dense
        uniforms; there is no default, which would be a function of a 2⁻⁵³ grid)."""
        raise NotImplementedError

    def laplace(self, size: int, scale: float) -> np.ndarray:
        """``size`` Laplace draws of scale ``scale`` (as :meth:`normal`: no default)."""
        raise NotImplementedError

    def bernoulli(self, probability: float, size: int) -> np.ndarray:
        if probability >= 1.0:
            return np.ones(size, dtype=bool)
        return self.uniform(size) < probability

    def choice(self, n: int) -> int:
        """A uniform integer in ``[0, n)``."""
        return min(int(self.uniform(1)[0] * n), n - 1)

    def get_state(self) -> dict | None:
        """State to persist so a resumed seeded run continues the same draws (None: CSPRNG)."""
        return None

    def set_state(self, state: dict | None) -> None:
        """Restore :meth:`get_state`'s value; a CSPRNG has nothing to restore."""


#: Bytes of keystream drawn under one key before the source takes a fresh key from the OS
#: (1 GiB: far below ChaCha20's 2³² blocks · 64 B = 256 GiB per key and nonce).
REKEY_BYTES = 1 << 30

#: 2⁻⁵³: a 53-bit integer times this is a double in [0, 1) without rounding.
_TWO_TO_MINUS_53 = 1.0 / 9007199254740992.0
#: 2⁻⁵²: the spacing of the doubles in [1, 2).
_TWO_TO_MINUS_52 = 2.0 * _TWO_TO_MINUS_53
#: The deepest binade ``k`` of the dense uniforms (``[2⁻¹⁰²², 2⁻¹⁰²¹)``, the last of normal
#: doubles): noise ends past 37 standard deviations and 707 Laplace scales.
DEEPEST_BINADE = 1021


@numba.njit(cache=True, nogil=True)
def _open_unit_uniforms(words: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[i] = (2·(words[i] >> 12) + 1)·2⁻⁵³``: a uniform in (0, 1) on the grid of odd
    multiples of 2⁻⁵³, never 0 or 1 (an odd number below 2⁵³ is exact in a double; the
    53-bit ``(j + ½)·2⁻⁵³`` needed 54 bits and rounded its largest ``j`` to 1.0, which made
    a Gumbel draw infinite).

    Compiled because numpy's uint64 → float64 cast is not vectorised (336 ms for 10⁷ words
    here, 6 ms in this loop). ``out`` may be ``words`` itself, viewed as float64."""
    for i in range(words.size):
        out[i] = float((words[i] >> np.uint64(12)) * np.uint64(2) + np.uint64(1)) * \
            _TWO_TO_MINUS_53


@numba.njit(cache=True, nogil=True)
def _dense_half_uniforms(words: np.ndarray, out: np.ndarray,
                         sign: np.ndarray) -> None:  # pragma: no cover
    """From three words a draw: ``out[i]`` uniform in (0, ½) with every double of
    ``[2⁻¹²⁹, ½)`` reachable, each with the probability of the width it stands for, and
    ``sign[i]`` = ±1.

    The binade ``[2^−(k+1), 2^−k)`` holds probability ``2^−k`` of a uniform on (0, ½), so
    ``k`` − 1 is the number of leading zero bits of the 128-bit number of words 2 and 3
    (``P(k) = 2^−k``), and its 2⁵² doubles ``2^−(k+1)·(1 + j·2⁻⁵²)`` are equally likely:
    ``j`` is the top 52 bits of word 1, whose lowest bit is the sign. Then
    ``P(u < x) = 2x`` at every double ``x`` of the range. When both words are zero (a
    chance of 2⁻¹²⁸) ``out[i]`` is 0, and :meth:`SecureNoise._signed_half_uniforms` reads
    the binade on from more words."""
    for i in range(out.size):
        first, high, low = words[3 * i], words[3 * i + 1], words[3 * i + 2]
        sign[i] = 1.0 if first & np.uint64(1) else -1.0
        k = 1
        bits = high
        if bits == 0:
            k += 64
            bits = low
        if bits == 0:
            out[i] = 0.0
            continue
        while bits < np.uint64(1) << np.uint64(63):
            bits <<= np.uint64(1)
            k += 1
        out[i] = math.ldexp(binade_point(first), -(k + 1))


@numba.njit(cache=True, nogil=True)
def binade_point(first: np.uint64) -> float:  # pragma: no cover
    """``1 + j·2⁻⁵²`` for the top 52 bits ``j`` of ``first``: one of the 2⁵² doubles of
    [1, 2), exact."""
    return 1.0 + float(first >> np.uint64(12)) * _TWO_TO_MINUS_52


class SecureNoise(NoiseSource):
    """Randomness from a ChaCha20 keystream keyed by the OS CSPRNG (see the module docstring).

    A forked child (a multiprocessing worker) notices the new process id and takes its own
    key, so two processes never share a keystream. Pickling drops the key for the same reason.
    """

    def __init__(self) -> None:
        self._encryptor = None
        self._owner_pid = -1
        self._drawn = 0

    def _keystream(self, n_bytes: int):
        if self._owner_pid != os.getpid() or self._drawn + n_bytes > REKEY_BYTES:
            # A fresh 256-bit key from the OS; with a never reused key the nonce may be fixed.
            cipher = Cipher(algorithms.ChaCha20(os.urandom(32), bytes(16)), mode=None)
            self._encryptor = cipher.encryptor()
            self._owner_pid, self._drawn = os.getpid(), 0
        self._drawn += n_bytes
        return self._encryptor

    def words(self, size: int, out: np.ndarray | None = None) -> np.ndarray:
        """``size`` uniform 64-bit words (into ``out`` if given): the keystream XORed into
        zeros, in place."""
        if out is None:
            words = np.zeros(size, dtype=np.uint64)  # calloc'd pages: zero already
        else:
            words = out
            words.fill(0)
        chunk = REKEY_BYTES // 8  # a request larger than one key's share is drawn in parts
        for start in range(0, size, chunk):
            part = memoryview(words[start:start + chunk]).cast("B")
            self._keystream(len(part)).update_into(part, part)
        return words

    def uniform(self, size: int) -> np.ndarray:
        return self.uniform_into(np.empty(size, dtype=np.float64))

    def uniform_into(self, out: np.ndarray) -> np.ndarray:
        words = self.words(out.size, out.view(np.uint64))
        _open_unit_uniforms(words, out)  # in place: each word becomes its uniform
        return out

    def _signed_half_uniforms(self, size: int) -> tuple[np.ndarray, np.ndarray]:
        u, sign = np.empty(size), np.empty(size)
        words = self.words(3 * size)
        _dense_half_uniforms(words, u, sign)
        for i in np.flatnonzero(u == 0.0).tolist():  # 128 zero bits: a chance of 2⁻¹²⁸
            u[i] = self._deep_uniform(words[3 * i])
        return u, sign

    def _deep_uniform(self, first: np.uint64) -> float:
        """The uniform of a draw whose first 128 exponent bits were zero: its binade read on
        from further words, down to :data:`DEEPEST_BINADE` (the binades below it, a mass of
        2⁻¹⁰²¹, are read as that one: a double there would be subnormal and could not hold
        the 2⁵² points)."""
        k = 129
        while k < DEEPEST_BINADE:
            word = int(self.words(1)[0])
            if word:
                k = min(k + 64 - word.bit_length(), DEEPEST_BINADE)
                break
            k += 64
        return math.ldexp(binade_point(first), -(min(k, DEEPEST_BINADE) + 1))

    def normal(self, size: int, std: float | np.ndarray = 1.0) -> np.ndarray:
        """Gaussians from dense uniforms (see the module docstring)."""
        return gaussian_of(*self._signed_half_uniforms(size), std)

    def laplace(self, size: int, scale: float) -> np.ndarray:
        """Laplace draws from dense uniforms (see the module docstring)."""
        return laplace_of(*self._signed_half_uniforms(size), scale)

    def __getstate__(self) -> dict:
        return {}

    def __setstate__(self, state: dict) -> None:
        self.__init__()


class SeededNoise(NoiseSource):
    """Reproducible randomness for tests and experiments; *not* private."""

    seeded = True

    def __init__(self, seed: int | np.random.SeedSequence) -> None:
        self._rng = np.random.default_rng(seed)

    def uniform(self, size: int) -> np.ndarray:
        return self._rng.random(size)

    def uniform_into(self, out: np.ndarray) -> np.ndarray:
        return self._rng.random(out=out)

    def normal(self, size: int, std: float | np.ndarray = 1.0) -> np.ndarray:
        return self._rng.standard_normal(size) * std

    def laplace(self, size: int, scale: float) -> np.ndarray:
        """Laplace draws by inversion of the CDF: −b·sign(u)·ln(1 − 2|u|), u ∈ (−½, ½)
        (test-only: a u of exactly −½, a chance of 2⁻⁵³, gives an infinite draw)."""
        u = self.uniform(size) - 0.5
        return -scale * np.sign(u) * np.log1p(-2.0 * np.abs(u))

    def get_state(self) -> dict | None:
        return self._rng.bit_generator.state

    def set_state(self, state: dict | None) -> None:
        if state is not None:
            self._rng.bit_generator.state = state


def noise_source(seed: int | np.random.SeedSequence | None, *, warn: bool = True) -> NoiseSource:
    """The CSPRNG for ``seed=None``, else a seeded generator that warns it is test-only.
    A seed is a whole number >= 0 (or a ``SeedSequence``); anything else is refused here,
    naming ``seed``, rather than inside numpy."""
    if seed is None:
        return SecureNoise()
    if not isinstance(seed, np.random.SeedSequence) and (
            isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or seed < 0):
        raise ValueError(f"seed must be None (the CSPRNG: production) or a whole number >= 0 "
                         f"(reproducible noise, for tests only), got {seed!r}")
    if warn:
        warnings.warn(
            f"seed={seed!r}: the noise is reproducible and predictable, so this model is for "
            "testing only and carries no privacy guarantee. Use seed=None in production.",
            TestingOnlyWarning,
            stacklevel=outside_stacklevel(),
        )
    return SeededNoise(seed)
