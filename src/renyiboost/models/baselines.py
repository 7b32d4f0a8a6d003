"""Baselines that set the floor under the learner."""

from __future__ import annotations

import numpy as np

from renyiboost.accounting import Calibration, LeafRelease, calibrate
from renyiboost.accounting.inputs import check_delta, check_epsilon
from renyiboost.models.booster import noisy_class_frequencies
from renyiboost.models.losses import SquaredLoss, unscale_margin
from renyiboost.randomness import noise_source
from renyiboost.schema import PublicSchema


class DPMeanBaseline:
    """Predicts one DP mean of the clipped labels for every input (the trivial DP model).

    The whole (ε, δ) budget goes to a single depth-0 DP leaf, released like the learner's
    initial score: (noisy Σ clipped y) / (noisy n) with Gaussian noise of scale σ from
    :func:`calibrate` (one round, no subsampling, shares 0.5/0.5). With a multiclass label
    set it is the DP class prior: a histogram of the labels, each count with noise std
    σ/√2 (a record adds a one-hot vector of L2 norm 1: the same mechanism), normalised.

    Examples
    --------
    >>> import numpy as np
    >>> schema = PublicSchema(features={"a": (0, 1)}, target_bounds=(0, 10))
    >>> model = DPMeanBaseline(schema, "regression", epsilon=1.0, delta=1e-6, seed=0)
    >>> pred = model.fit(np.zeros((5000, 1)), np.full(5000, 4.0)).predict(np.zeros((2, 1)))
    >>> bool(abs(pred[0] - 4.0) < 0.2)
    True
    """

    def __init__(
        self, schema: PublicSchema, task: str, epsilon: float, delta: float, seed: int | None = None
    ) -> None:
        if task == "regression" and schema.target_bounds is None:
            raise ValueError("regression needs public target_bounds")
        epsilon = check_epsilon(epsilon, allow_none=False)  # the learners' checks
        delta = check_delta(delta)
        self.schema, self.task, self.epsilon, self.delta, self.seed = (
            schema, task, epsilon, delta, seed
        )
        self.calibration: Calibration = calibrate(epsilon, delta, rounds=1, init_share=0.0)
        self.value_: float | None = None
        #: Class probabilities of a multiclass fit, in the order of ``schema.labels``.
        self.proba_: np.ndarray | None = None

    def fit(self, X: np.ndarray, y: np.ndarray) -> DPMeanBaseline:
        noise = noise_source(self.seed, warn=False)
        release = LeafRelease(self.calibration.sigma, 0.5)
        codes = None
        if self.task == "classification" and self.schema.labels is not None:
            codes = self.schema.label_codes(y)
            if (codes < 0).any():
                raise ValueError("a label is not in the schema's public label set")
        if self.schema.n_classes > 2 and self.task == "classification":
            self.proba_ = noisy_class_frequencies(codes, self.schema.n_classes,
                                                  release.lone_sum_noise_std(1.0), noise)
            return self
        if self.task == "regression":
            lo, hi = self.schema.target_bounds  # type: ignore[misc]
            scaled = SquaredLoss(lo, hi, grad_clip=1.0).scale(y)
        else:  # a label adds at most 1 to the sum: the noise is sized for that
            scaled = np.asarray(y, float) if codes is None else codes.astype(float)
            if not np.isin(scaled, (0.0, 1.0)).all():
                raise ValueError("binary labels must be 0 or 1 (or give the schema a public "
                                 "label set, labels=[...]): each adds at most 1 to the noisy "
                                 "sum")
        total = noise.add_gaussian(scaled.sum(), release.sum_noise_std(1.0))
        count = noise.add_gaussian(scaled.size, release.count_noise_std(1.0))
        mean = float(total / count) if count > 1 else 0.0
        if self.task == "regression":
            bounds = self.schema.target_bounds
            self.value_ = float(unscale_margin(mean, bounds))  # type: ignore[arg-type]
        else:
            self.value_ = min(max(mean, 0.0), 1.0)
        return self

    def predict(self, X: np.ndarray) -> np.ndarray:
        n = np.atleast_2d(X).shape[0]
        if self.proba_ is not None:
            return np.full(n, self.schema.label_of(int(self.proba_.argmax())), dtype=object)
        if self.value_ is None:
            raise RuntimeError("fit the baseline first")
        if self.task == "regression":
            return np.full(n, self.value_)
        return np.full(n, int(self.value_ > 0.5))

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        if self.proba_ is not None:
            return np.tile(self.proba_, (np.atleast_2d(X).shape[0], 1))
        p = np.full(np.atleast_2d(X).shape[0], float(self.value_))
        return np.column_stack([1.0 - p, p])


__all__ = ["DPMeanBaseline"]
