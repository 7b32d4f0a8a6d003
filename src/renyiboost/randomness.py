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

Uniforms take the top 53 bits of each 64-bit word: ``(w >> 11 + ½) / 2⁵³`` lies in (0, 1).
Gaussians come from the inverse normal CDF (``scipy.special.ndtri``); their tails end near
8.3 standard deviations; no floating-point hardening (Mironov 2012) is attempted beyond that.
"""

from __future__ import annotations

import numbers
import os
import warnings

import numba
import numpy as np
from cryptography.hazmat.primitives.ciphers import Cipher, algorithms
from scipy.special import ndtri

from renyiboost.exceptions import TestingOnlyWarning


class NoiseSource:
    """Uniforms, Gaussians, Bernoulli draws and choices from one generator."""

    seeded: bool = False

    def uniform(self, size: int) -> np.ndarray:
        raise NotImplementedError

    def uniform_into(self, out: np.ndarray) -> np.ndarray:
        """Fill the float64 array ``out`` with the next ``out.size`` uniforms (the draws
        ``uniform(out.size)`` would give); a caller that reuses ``out`` every round spares
        fresh pages of memory (a round at 10⁷ records drew 80 MB of them)."""
        out[:] = self.uniform(out.size)
        return out

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


@numba.njit(cache=True, nogil=True)
def _open_unit_uniforms(words: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover
    """``out[i] = ((words[i] >> 11) + ½)·2⁻⁵³``: a uniform in (0, 1), never 0 or 1.

    Compiled because numpy's uint64 → float64 cast is not vectorised (336 ms for 10⁷ words
    here, 6 ms in this loop). ``out`` may be ``words`` itself, viewed as float64."""
    for i in range(words.size):
        out[i] = (float(words[i] >> np.uint64(11)) + 0.5) * _TWO_TO_MINUS_53


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
            stacklevel=3,
        )
    return SeededNoise(seed)
