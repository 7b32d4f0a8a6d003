"""The secure noise source: a ChaCha20 keystream keyed from ``os.urandom`` (invariant 6).

The keystream is checked against an independent ChaCha20 block function written from
RFC 8439 (its test vector first), so a source that fell back to a predictable generator,
reused a key across processes, or skipped rekeying fails here.
"""

from __future__ import annotations

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


def test_uniforms_bernoulli_and_normals_have_their_distributions() -> None:
    source = SecureNoise()
    u = source.uniform(200_000)
    assert 0 < u.min() and u.max() < 1
    assert stats.kstest(u, "uniform").pvalue > 1e-4  # fails for a biased or constant stream
    hits = source.bernoulli(0.1, 200_000).mean()
    assert abs(hits - 0.1) < 5 * np.sqrt(0.1 * 0.9 / 200_000)
    z = source.normal(200_000, 2.0)
    assert abs(z.std() - 2.0) < 0.02 and abs(z.mean()) < 0.02
    assert not np.array_equal(SecureNoise().words(4), SecureNoise().words(4))
