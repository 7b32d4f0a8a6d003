"""Compiled kernels of the training round (numba), one pass over the pool each.

A round of :class:`~renyiboost.models.booster.SGBDTBooster` needs, per active record: its
leaf in the new tree, its clipped gradient and leaf denominator, its squared sensitivity s²,
the filter's charge code and new spent budget, its Poisson draw, and — for the sampled ones —
its share of two per-leaf sums. The leaves come from the compiled router of prediction
(:func:`~renyiboost.models.predict_kernels.route_tree`). In numpy that is about twenty
passes, each writing a fresh array of the pool's size (159 ms at 10⁶ records, and the cost
per record grew 1.6× towards 10⁷ as the arrays left the caches). :func:`round_pass` does it
in one pass that reads each record once and writes only what the round must keep (leaf
index, charge code, spent, retired), and :func:`margin_pass` adds the released leaves to the
cached margins in a second.

The numpy path of the booster (``SGBDTBooster(..., compiled=False)``) stays the reference:
tests run both on the same pool and the same random bits and compare the charges, leaf sums
and margins. The accounting rules come from :mod:`renyiboost.accounting` as compiled scalar
twins of its numpy code (s² from :func:`~renyiboost.accounting.leaf.squared_sensitivity`, the charge
code, admission and retirement from :mod:`renyiboost.accounting.filter`); the rest is
written in the reference's order (leaf sums accumulated in record order), so the two paths
agree to the bit wherever the elementary functions do.
"""

from __future__ import annotations

import math

import numba
import numpy as np

from renyiboost.accounting.filter import (
    NOT_ELIGIBLE,
    charge_code,
    charged_with,
    exhausted,
    within,
)
from renyiboost.accounting.leaf import squared_sensitivity
from renyiboost.models.predict_kernels import route_tree

#: Loss codes of :func:`round_pass`.
SQUARED, LOGISTIC, LOGISTIC_NEWTON = 0, 1, 2

_NOT_ELIGIBLE = int(NOT_ELIGIBLE)  # a plain int: a compile-time constant of the kernels

#: FNV-1a (Fowler, Noll, Vo) 64-bit offset basis and prime, for :func:`codes_digest`.
_FNV_BASIS = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)


@numba.njit(cache=True, nogil=True, inline="always")
def _digest_step(digest: np.uint64, code: int) -> np.uint64:  # pragma: no cover - compiled
    return (digest ^ np.uint64(code)) * _FNV_PRIME


@numba.njit(cache=True, nogil=True)
def codes_digest(codes: np.ndarray) -> np.uint64:  # pragma: no cover - compiled
    """FNV-1a over the charge codes of the active records, in pool order (one 16-bit code a
    step). A committed round stores it instead of the codes: a restore recomputes the codes
    from the committed state and must find the same digest (not a cryptographic hash: it
    detects a replay that computes differently, nobody forges a store)."""
    digest = _FNV_BASIS
    for code in codes:
        digest = _digest_step(digest, code)
    return digest


@numba.njit(cache=True, nogil=True)
def round_pass(
    X: np.ndarray, features: np.ndarray, thresholds: np.ndarray, is_categorical: np.ndarray,
    depth: int, margin: np.ndarray, target: np.ndarray, spent: np.ndarray,
    retired: np.ndarray, loss: int, grad_clip: float, hess_clip: float, proper: bool,
    private: bool,
    full_charge: bool, count_share: float, grad_share: float, grid_charges: np.ndarray,
    min_sensitivity2: float, budget: float, min_charge: float, uniforms: np.ndarray,
    sampling_rate: float, shift: int, leaf_out: np.ndarray, codes_out: np.ndarray,
    spent_out: np.ndarray, retired_out: np.ndarray, grad_sum: np.ndarray, den_sum: np.ndarray,
) -> tuple[int, int, np.uint64]:  # pragma: no cover - compiled; tested against numpy
    """One round over the pool: route, gradient, charge, draw, leaf sums (see module doc).

    Records with ``retired[i]`` are skipped (leaf 0, code NOT_ELIGIBLE, spent unchanged).
    A record whose s² is NaN or infinite (a gradient or denominator that escaped its clip)
    is not admitted, and a finite s² above 1 is charged in full: the filter fails closed
    where the numpy reference raises
    (:func:`~renyiboost.accounting.filter.check_sensitivity2`).
    ``uniforms`` holds one uniform per active record in pool order (the reference's
    Bernoulli draws); it is ignored when ``sampling_rate >= 1``. ``margin`` is the margin
    the gradients come from. Returns ``(n_eligible, n_sampled, digest)``, the digest being
    :func:`codes_digest` of the active records' codes.
    """
    resolution = grid_charges.size - 1
    route_tree(X, features, thresholds, is_categorical, depth, leaf_out)
    n_eligible = 0
    n_sampled = 0
    digest = _FNV_BASIS
    k = 0  # index among the active records (the uniforms' index)
    for i in range(X.shape[0]):
        if retired[i]:
            leaf_out[i] = 0
            codes_out[i] = _NOT_ELIGIBLE
            spent_out[i] = spent[i]
            retired_out[i] = True
            continue
        leaf = leaf_out[i]
        # the loss: clipped gradient g, leaf denominator, a = den / its sensitivity
        if loss == SQUARED:
            raw = margin[i] - target[i]
            den = 1.0
            a = 1.0
        else:
            # scipy's expit is this formula on libm's exp, bit for bit (e^(−m) = inf → p = 0)
            p = 1.0 / (1.0 + math.exp(-margin[i]))
            raw = p - target[i]
            hess = p * (1.0 - p)
            if proper:  # LogisticLoss's "proper" gradient: weighted by c / max(p, 1 − p)
                weight = grad_clip / max(p, 1.0 - p)
                raw *= weight
                hess *= weight
            if loss == LOGISTIC_NEWTON:
                den = min(hess, hess_clip)
                a = den / hess_clip
            else:
                den = 1.0
                a = 1.0
        g = min(max(raw, -grad_clip), grad_clip)
        eligible = True
        if private:
            if full_charge:  # the full price; a NaN gradient or denominator is in no sum
                s2 = 1.0 if math.isfinite(g) and math.isfinite(den) else math.nan  # (G2 #3)
            else:
                s2 = squared_sensitivity(count_share, grad_share, a, abs(g) / grad_clip)
            index = charge_code(s2, min_sensitivity2, resolution)
            charge = grid_charges[index]
            # admitted_with on the sum added once: NaN (never within) for a NaN or
            # infinite s², which is charged nothing and in no sum (the numpy path raises)
            after = charged_with(spent[i], charge, s2)
            eligible = within(after, budget)
            if eligible:
                codes_out[i] = index
                spent_out[i] = after
                n_eligible += 1
            else:
                codes_out[i] = _NOT_ELIGIBLE
                spent_out[i] = spent[i] + 0.0
            retired_out[i] = exhausted(spent_out[i], budget, min_charge)
            digest = _digest_step(digest, codes_out[i])
        else:
            codes_out[i] = _NOT_ELIGIBLE
            spent_out[i] = spent[i]
            retired_out[i] = False
            n_eligible += 1
        sampled = eligible and (sampling_rate >= 1.0 or uniforms[k] < sampling_rate)
        k += 1
        if sampled:
            n_sampled += 1
            slot = leaf >> shift
            grad_sum[slot] += g
            den_sum[slot] += den
    return n_eligible, n_sampled, digest


@numba.njit(cache=True, nogil=True)
def margin_pass(margin: np.ndarray, leaves: np.ndarray, leaf_of_record: np.ndarray,
                retired: np.ndarray, out: np.ndarray) -> None:  # pragma: no cover - compiled
    """``out = margin + leaves[leaf]`` for the records still in the pool, ``margin`` else."""
    for i in range(margin.size):
        out[i] = margin[i] if retired[i] else margin[i] + leaves[leaf_of_record[i]]
