"""Losses of the S-GBDT learner, with the per-record sensitivities the filter charges.

Each loss returns the clipped gradient and the leaf denominator contribution of every
record, and the two ratios ``a`` (denominator contribution / its sensitivity) and ``b``
(|clipped gradient| / gradient clip) that :class:`~renyiboost.accounting.LeafRelease`
turns into the record's squared sensitivity.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np
from scipy.special import expit


@dataclass(frozen=True)
class LeafStatistics:
    """Per-record inputs of one DP leaf release."""

    grad: np.ndarray  # clipped gradient, |grad| <= grad_clip
    denominator: np.ndarray  # 1 (count leaves) or the clipped hessian (Newton leaves)
    count_ratio: np.ndarray | float  # a = denominator / its sensitivity, in [0, 1]
    grad_ratio: np.ndarray  # b = |grad| / grad_clip, in [0, 1]


def unscale_margin(margin: np.ndarray | float, bounds: tuple[float, float]) -> np.ndarray:
    """A regression prediction: the margin clipped to [−1, 1], mapped back to the public
    target bounds (the inverse of :meth:`SquaredLoss.scale`)."""
    lo, hi = bounds
    return lo + (np.clip(np.asarray(margin, dtype=float), -1.0, 1.0) + 1.0) * (hi - lo) / 2.0


@dataclass(frozen=True)
class SquaredLoss:
    """½(F − y)² on labels scaled to [−1, 1] by the *public* target bounds.

    The gradient ``F − y`` is clipped to ``[−grad_clip, grad_clip]``; the leaf denominator
    is the count (the hessian is 1).
    """

    lower: float
    upper: float
    grad_clip: float

    def scale(self, y: np.ndarray) -> np.ndarray:
        """Map labels from the public bounds to [−1, 1] (values outside are clipped)."""
        y = np.clip(np.asarray(y, dtype=float), self.lower, self.upper)
        return 2.0 * (y - self.lower) / (self.upper - self.lower) - 1.0

    def unscale(self, margin: np.ndarray) -> np.ndarray:
        """Predictions on the label's scale (see :func:`unscale_margin`)."""
        return unscale_margin(margin, (self.lower, self.upper))

    def statistics(self, margin: np.ndarray, target: np.ndarray) -> LeafStatistics:
        grad = np.clip(margin - target, -self.grad_clip, self.grad_clip)
        return LeafStatistics(
            grad=grad,
            denominator=np.ones_like(grad),
            count_ratio=1.0,
            grad_ratio=np.abs(grad) / self.grad_clip,
        )


@dataclass(frozen=True)
class LogisticLoss:
    """Binary log-loss on labels in {0, 1}; margin F, probability σ(F), gradient σ(F) − y.

    With ``hess_clip`` set, leaves are Newton steps: the denominator is the hessian
    ``p(1 − p)`` clipped to the public bound ``hess_clip`` (its sensitivity). A record is
    charged for both its clipped gradient and its clipped hessian (with clipped gradients
    ``p(1 − p) = |p − y|(1 − |p − y|)`` ties the two; proper ones weight both by w(p)).

    ``gradient`` says how a gradient is kept within ``grad_clip`` (c):

    * ``"clipped"`` (S-GBDT): ``clip(p − y, −c, c)``. A leaf settles where the clipped
      gradients cancel, and that is not where ``p`` is the leaf's rate q: with c = 0.3 and
      every record at p < 0.3, the positives pull with −0.3 each and the negatives push
      with p, so a leaf of rate q settles at ``p = 0.3 q/(1 − q)`` (q = 0.25: p = 0.1).
      The clip is a link function, ``q/(1 − q) = min(p, c)/min(1 − p, c)``, flat on
      [c, 1 − c]: probabilities come out pulled towards the majority class whenever the
      two classes mix in a leaf, even without noise (Adult: mean p 0.213 for a rate 0.246).
    * ``"proper"``: ``w(p)·(p − y)`` with the weight ``w(p) = c/max(p, 1 − p)``, which
      depends on the prediction only, never on the label. Then ``|g| ≤ c`` for every
      record, as with the clip, and a leaf settles where ``Σ w(p)(p − y) = 0``: at p = q
      when its records share p (the weighted score equation of the log-loss, so the loss
      stays proper). Newton leaves take the weighted hessian ``w(p)·p(1 − p)``, clipped to
      ``hess_clip``, as their denominator. The price: a well-fitted record's gradient
      shrinks by w (0.3 to 0.6 at c = 0.3) against an unchanged noise, so a small data set
      loses more to noise than it gains from the unbiased link; the default policy uses it
      where that is no longer so (:data:`~renyiboost.models.defaults.PROPER_GRADIENT_SIZE`).
    """

    grad_clip: float
    hess_clip: float | None = None
    gradient: Literal["clipped", "proper"] = "clipped"

    def scale(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=float)

    def statistics(self, margin: np.ndarray, target: np.ndarray) -> LeafStatistics:
        p = expit(margin)
        raw = p - target
        hess = p * (1.0 - p)
        if self.gradient == "proper":
            weight = self.grad_clip / np.maximum(p, 1.0 - p)
            raw, hess = weight * raw, weight * hess
        grad = np.clip(raw, -self.grad_clip, self.grad_clip)
        grad_ratio = np.abs(grad) / self.grad_clip
        if self.hess_clip is None:
            return LeafStatistics(grad, np.ones_like(grad), 1.0, grad_ratio)
        hess = np.minimum(hess, self.hess_clip)
        return LeafStatistics(grad, hess, hess / self.hess_clip, grad_ratio)


def softmax(margin: np.ndarray) -> np.ndarray:
    """Row-wise softmax of ``(n, C)`` margins (shifted by the row maximum: no overflow)."""
    z = np.exp(margin - margin.max(axis=-1, keepdims=True))
    return z / z.sum(axis=-1, keepdims=True)


def class_probabilities(margin: np.ndarray) -> np.ndarray:
    """Class probabilities, one column a class: the softmax of ``(n, C)`` margins, or
    ``[1 − σ(F), σ(F)]`` of binary log-odds ``(n,)``."""
    if margin.ndim == 2:
        return softmax(margin)
    p = expit(margin)
    return np.column_stack([1.0 - p, p])


def class_codes(margin: np.ndarray) -> np.ndarray:
    """Each row's class index, decided on the margins (``F > 0`` of binary log-odds, the
    largest of ``(n, C)`` margins; ties go to the first class) rather than on the
    probabilities, which rounding can tie where the margins differ: every answer path
    (estimators, batch fits, the follower, ONNX) labels the same way."""
    if margin.ndim == 2:
        return margin.argmax(axis=1)
    return (margin > 0.0).astype(np.int64)


@dataclass(frozen=True)
class SoftmaxLoss:
    """Multiclass log-loss (softmax over ``n_classes`` margins); labels are class indices.

    The gradient of record i is the vector ``g = p − e_y`` (‖g‖₂ ≤ √2), clipped **in L2 norm**
    to ``grad_clip``: ``g · min(1, grad_clip/‖g‖)``. A vector leaf releases the C sums of
    the clipped gradients, each with the per-coordinate noise of a scalar sum, and one noisy
    count. Whitened, the record's contribution has squared norm ``r1·a² + r2·(‖g‖/g*)²``:
    the scalar leaf's formula with ``b = ‖g_clipped‖₂/g*``, so the filter charges a record
    from the L2 norm of its clipped vector (issue 15, item 5) with the same charge table.
    Clipping each coordinate instead would bound ‖g‖ only by √C·g* and need √C times the
    noise. Leaves are count leaves (no Newton step: its hessian is a C×C matrix).
    """

    n_classes: int
    grad_clip: float

    def scale(self, y: np.ndarray) -> np.ndarray:
        return np.asarray(y, dtype=float)

    def statistics(self, margin: np.ndarray, target: np.ndarray) -> LeafStatistics:
        grad = softmax(margin)
        rows = np.arange(grad.shape[0])
        grad[rows, np.asarray(target, dtype=np.int64)] -= 1.0
        norm = np.sqrt(np.einsum("ij,ij->i", grad, grad))
        clipped = np.minimum(norm, self.grad_clip)
        grad *= np.divide(clipped, norm, out=np.ones_like(norm), where=norm > 0)[:, None]
        return LeafStatistics(grad, np.ones(grad.shape[0]), 1.0, clipped / self.grad_clip)
