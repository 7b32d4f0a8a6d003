"""The secure noise source: a ChaCha20 keystream keyed from ``os.urandom`` (invariant 6).

The keystream is checked against an independent ChaCha20 block function written from
RFC 8439 (its test vector first), so a source that fell back to a predictable generator,
reused a key across processes, or skipped rekeying fails here.
"""

from __future__ import annotations

import math
import os
import pickle
import struct

import numpy as np
import pytest
from scipy import stats

from renyiboost import randomness
from renyiboost.randomness import SecureNoise

MASK = 0xFFFFFFFF


def _rotl(v: int, c: int) -> int:
    return ((v << c) & MASK) | (v >> (32 - c))


def _quarter(s: list[int], a: int, b: int, c: int, d: int) -> None:
    """RFC 8439 Sec. 2.1: the quarter round on four words of the state, in place."""
    for x, y, z, shift in ((a, b, d, 16), (c, d, b, 12), (a, b, d, 8), (c, d, b, 7)):
        s[x] = (s[x] + s[y]) & MASK
        s[z] = _rotl(s[z] ^ s[x], shift)


def chacha20_block(key: bytes, counter: int, nonce: bytes) -> bytes:
    """RFC 8439 Sec. 2.3: one 64-byte keystream block (the reference, in plain Python)."""
    state = [0x61707865, 0x3320646E, 0x79622D32, 0x6B206574,
             *struct.unpack("<8I", key), counter, *struct.unpack("<3I", nonce)]
    s = list(state)
    columns_then_diagonals = ((0, 4, 8, 12), (1, 5, 9, 13), (2, 6, 10, 14), (3, 7, 11, 15),
                              (0, 5, 10, 15), (1, 6, 11, 12), (2, 7, 8, 13), (3, 4, 9, 14))
    for _ in range(10):
        for quarter in columns_then_diagonals:
            _quarter(s, *quarter)
    return struct.pack("<16I", *[(x + y) & MASK for x, y in zip(s, state, strict=True)])


def test_reference_block_matches_rfc8439_vector() -> None:
    """RFC 8439 Sec. 2.3.2: key 00..1f, nonce 00 00 00 09 00 00 00 4a 00 00 00 00, counter 1."""
    block = chacha20_block(bytes(range(32)), 1, bytes.fromhex("000000090000004a00000000"))
    assert block[:16].hex() == "10f1e7e4d13b5915500fdd1fa32071c4"
    assert block[-4:].hex() == "a2503c4e"


def test_words_are_the_chacha20_keystream_of_an_os_key(monkeypatch: pytest.MonkeyPatch) -> None:
    key = bytes(range(100, 132))
    calls: list[int] = []

    def fake_urandom(n: int) -> bytes:
        calls.append(n)
        return key

    monkeypatch.setattr(randomness.os, "urandom", fake_urandom)
    words = SecureNoise().words(24)  # 192 bytes: three blocks, counters 0, 1, 2
    expected = b"".join(chacha20_block(key, c, bytes(12)) for c in range(3))
    assert words.tobytes() == expected
    assert calls == [32]  # the whole key from the OS, once


def test_rekeys_after_its_share_of_keystream(monkeypatch: pytest.MonkeyPatch) -> None:
    keys = iter([bytes([1]) * 32, bytes([2]) * 32, bytes([3]) * 32])
    monkeypatch.setattr(randomness.os, "urandom", lambda n: next(keys))
    monkeypatch.setattr(randomness, "REKEY_BYTES", 128)
    source = SecureNoise()
    first, second = source.words(16), source.words(16)
    assert first.tobytes() == chacha20_block(bytes([1]) * 32, 0, bytes(12)) + \
        chacha20_block(bytes([1]) * 32, 1, bytes(12))
    assert second.tobytes()[:64] == chacha20_block(bytes([2]) * 32, 0, bytes(12))


def test_a_forked_child_never_shares_the_parents_keystream() -> None:
    source = SecureNoise()
    source.words(4)  # the parent holds a key before the fork
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: its next words, to the parent
        try:
            os.write(write, source.words(4).tobytes())
        finally:
            os._exit(0)
    os.close(write)
    child = os.read(read, 32)
    os.waitpid(pid, 0)
    assert len(child) == 32 and child != source.words(4).tobytes()


def test_pickling_drops_the_key() -> None:
    source = SecureNoise()
    source.words(1)
    state = pickle.dumps(source)
    assert source._encryptor is not None
    assert pickle.loads(state)._encryptor is None


def test_uniforms_bernoulli_and_normals_have_their_distributions(monkeypatch) -> None:
    """The draws of the production source (ChaCha20 keyed from ``os.urandom``) have their
    distributions. The key is fixed here: with a fresh one the KS test alone failed 1 run
    in 10,000 (p > 1e-4), and a suite run must not fail by chance; the cipher, the key
    schedule and the conversions are the production ones."""
    calls = iter(range(1_000_000))
    monkeypatch.setattr(randomness.os, "urandom",
                        lambda n: np.random.default_rng(next(calls)).bytes(n))
    source = SecureNoise()
    u = source.uniform(200_000)
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-4  # fails for a biased or constant stream
    hits = source.bernoulli(0.1, 200_000).mean()
    assert abs(hits - 0.1) < 5 * np.sqrt(0.1 * 0.9 / 200_000)
    z = source.normal(200_000, 2.0)
    assert abs(z.std() - 2.0) < 0.02 and abs(z.mean()) < 0.02
    monkeypatch.undo()
    assert not np.array_equal(SecureNoise().words(4), SecureNoise().words(4))


# ------------------------------------------------------- noise on floating-point numbers
#: A dense uniform of :func:`randomness._dense_half_uniforms` by its rank: binade ``k`` (from
#: 128, the smallest, up) and mantissa ``m``; rank ``(128 − k)·2⁵² + m`` orders them by value.
_MANTISSAS = 2**52


def _dense_value(rank: np.ndarray) -> np.ndarray:
    k, m = 128 - rank // _MANTISSAS, rank % _MANTISSAS
    return np.ldexp(1.0 + m.astype(float) * 2.0**-52, -(k + 1))


def _mass_below(rank: np.ndarray) -> np.ndarray:
    """P(u < the uniform of ``rank``): the binades below hold 2^−k (the deeper ones past
    binade 128 included), the mantissas before it m · 2^−k · 2⁻⁵² (exact in a double)."""
    k, m = 128 - rank // _MANTISSAS, rank % _MANTISSAS
    return np.ldexp(1.0 + m.astype(float) * 2.0**-52, -k)


def _first_rank(reaches: callable, n: int) -> np.ndarray:
    """For each of ``n`` thresholds, the lowest rank whose uniform ``reaches`` it (a
    monotone predicate over ranks, vectorised), by bisection over all 128 · 2⁵² ranks."""
    lo, hi = np.zeros(n, dtype=np.int64), np.full(n, 128 * _MANTISSAS, dtype=np.int64)
    while (lo < hi).any():
        mid = (lo + hi) // 2
        ok = reaches(mid)
        hi, lo = np.where(ok, mid, hi), np.where(ok, lo, mid + 1)
    return lo


def test_dense_uniforms_are_the_binade_and_mantissa_of_their_words() -> None:
    """Three words make one draw: the mantissa and sign from the first, the binade from the
    leading zeros of the other two (128 bits), as the exact count below assumes; every
    double of a binade is a possible draw (all 2⁵² mantissas, the binade's edge included,
    never ½)."""
    rng = np.random.default_rng(7)
    words = rng.integers(0, 2**64, size=(200, 3), dtype=np.uint64)
    words[0, 1:] = 0  # both zero: left to the deeper words (marked 0 here)
    words[1, 1], words[1, 2] = 0, 1  # 127 leading zeros
    words[2, 1] = 1 << 63  # none: [1/4, 1/2)
    words[3, 1] = 1  # 63
    words[4, 1], words[4, 2] = 0, 1 << 63  # 64: the binade is read on into the third word
    words[5, 0], words[6, 0] = 0, 2**64 - 1  # the binade's edge; its last double below 1/2
    u, sign = np.empty(200), np.empty(200)
    randomness._dense_half_uniforms(words.ravel(), u, sign)
    assert u[0] == 0.0
    for (first, high, low), value, s in list(zip(words.tolist(), u, sign, strict=True))[1:]:
        k = 1 + 128 - ((high << 64) | low).bit_length()
        assert value == _dense_value(np.array([(128 - k) * _MANTISSAS + (first >> 12)]))[0]
        assert s == (1.0 if first & 1 else -1.0)
    assert u[1:].max() < 0.5 and u[1:].min() > 0
    assert np.frexp(u[5])[0] == 0.5  # a binade's edge, 2^−(k+1) itself
    assert u[6] == np.nextafter(np.ldexp(1.0, np.frexp(u[6])[1]), 0)  # the binade's last


def test_a_draw_past_128_zero_bits_reads_its_binade_from_more_words() -> None:
    """The 2⁻¹²⁸ chance that the two exponent words are zero: the binade is read on from
    further words (here 64 more zeros, then a word with 3 leading zeros: binade
    129 + 64 + 3), down to the last binade of normal doubles."""
    class Scripted(SecureNoise):
        def __init__(self, words: list[int]) -> None:
            super().__init__()
            self.queue = list(words)

        def words(self, size: int, out: np.ndarray | None = None) -> np.ndarray:
            taken, self.queue = self.queue[:size], self.queue[size:]
            return np.array(taken, dtype=np.uint64)

    first = (12345 << 12) | 1
    u, sign = Scripted([first, 0, 0, 0, 1 << 60])._signed_half_uniforms(1)
    assert u[0] == math.ldexp(1.0 + 12345 * 2.0**-52, -(129 + 64 + 3 + 1)) and sign[0] == 1.0
    u, _ = Scripted([first, 0, 0] + [0] * 20)._signed_half_uniforms(1)  # zeros to the end
    assert u[0] == math.ldexp(1.0 + 12345 * 2.0**-52, -(randomness.DEEPEST_BINADE + 1))
    assert u[0] >= np.finfo(float).tiny  # a normal double


@pytest.mark.parametrize(("shift", "kind"), [(0.0, "gaussian"), (0.37, "gaussian"),
                                             (1.0, "gaussian"), (0.37, "laplace")])
def test_every_released_value_has_the_ideal_mechanisms_probability(shift, kind) -> None:
    """Mironov's attack on floating-point noise: with uniforms on a 2⁻⁵³ grid and no
    rounding, 48 % of the releases of one noisy sum (σ = 2.76) were impossible under the
    neighbour, an infinite privacy loss. Here the probability of every cell a release can
    land in (``value + noise`` rounded to σ/64) is counted exactly over the dense uniforms
    the secure source draws, through the source's own map (``gaussian_of`` or
    ``laplace_of``, then ``snap``), and compared with the ideal continuous mechanism's mass
    of the cell over ±12 scales. A shift of the value stands for a neighbour: every cell
    keeps its ideal probability up to a relative 1e-11, so the rounded release is
    post-processing of the ideal mechanism, which is what the accounting charges."""
    scale = 2.76
    grid = scale * randomness.NOISE_GRID_SHARE
    f = shift * scale
    cells = np.arange(-12 * 64, 12 * 64 + 1) * grid  # the releases a cell holds
    to_noise = randomness.gaussian_of if kind == "gaussian" else randomness.laplace_of
    mass = np.zeros(cells.size - 1)
    for sign in (1.0, -1.0):  # +1: the noise is negative and rises with the rank
        def released(rank: np.ndarray, sign: float = sign) -> np.ndarray:
            noise = to_noise(_dense_value(rank), sign, scale)
            return randomness.snap(f + noise, scale)

        if sign > 0:  # ranks from first[c] on release at least cells[c]
            first = _first_rank(lambda rank: released(rank) >= cells, cells.size)
            mass += 0.5 * (_mass_below(first[1:]) - _mass_below(first[:-1]))
        else:  # falling: ranks from first[c] on release less than cells[c]
            first = _first_rank(lambda rank: released(rank) < cells, cells.size)
            mass += 0.5 * (_mass_below(first[:-1]) - _mass_below(first[1:]))
    law = stats.norm if kind == "gaussian" else stats.laplace
    lower, upper = (cells[:-1] - grid / 2 - f) / scale, (cells[:-1] + grid / 2 - f) / scale
    ideal = np.where(upper <= 0, law.cdf(upper) - law.cdf(lower),
                     law.sf(lower) - law.sf(upper))
    assert (mass > 0).all()
    np.testing.assert_allclose(mass, ideal, rtol=1e-11, atol=0)  # measured: 6.2e-13
