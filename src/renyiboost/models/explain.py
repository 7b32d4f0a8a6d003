"""Explanations of a released tree ensemble (free post-processing: they read the release).

* :func:`feature_contributions` — exact per-feature contributions when every tree tests a
  single feature (S-GBDT with ``feature_selection="cyclic"``, as S-BDT and DP-EBM train):
  the model is then a sum of per-feature functions, and a row's margin is its initial term
  (:func:`initial_term`) plus one term a feature (a smoothed ensemble's terms are smoothed
  the same way, so they still add up to its margin; a recalibrated one's, whose
  ``answer_map`` is ``(a, b)``, are scaled by ``a``, and its initial term is
  ``a · init_score + b``).
* :func:`feature_importances` — for any ensemble, each feature's share of the trees'
  effect: a tree's mean absolute leaf value, split among the features its nodes test in
  proportion to the nodes. A summary, not an exact decomposition.
"""

from __future__ import annotations

import numpy as np

from renyiboost.models.trees import Ensemble


def tree_features(ensemble: Ensemble) -> list[np.ndarray]:
    """The distinct features each tree tests."""
    return [np.unique(row) for row in ensemble.features]


def initial_term(ensemble: Ensemble) -> float | list[float]:
    """The part of every row's margin that no feature owns: the initial score, or
    ``a · init_score + b`` for a recalibrated ensemble whose ``answer_map`` is ``(a, b)``
    (a list a class for a multiclass model). With :func:`feature_contributions` it adds up
    to :meth:`Ensemble.predict_margin <renyiboost.models.trees.Ensemble.predict_margin>`."""
    init = np.asarray(ensemble.init_score, dtype=float)
    if ensemble.answer_map is not None:
        scale, offset = ensemble.answer_map
        init = scale * init + offset
    return init.tolist()  # type: ignore[no-any-return]


def feature_contributions(ensemble: Ensemble, X: np.ndarray, n_features: int) -> np.ndarray:
    """Per row of the encoded ``X`` and per feature, the summed leaf values of the trees
    that test that feature, scaled by ``a`` for a recalibrated ensemble (the initial term is
    not included: :func:`initial_term`); per class too for vector leaves (shape ``(n, k,
    C)``). Raises ``ValueError`` when a tree tests more than one feature: no exact
    per-feature split exists then."""
    if ensemble.depth == 0:
        raise ValueError("a model of depth 0 has trees of one leaf each, which test no "
                         "feature: there is no per-feature split of its margin")
    tested = tree_features(ensemble)
    mixed = [t for t, features in enumerate(tested) if features.size > 1]
    if mixed:
        raise ValueError(
            f"{len(mixed)} trees (e.g. {mixed[:3]}) test several features: a per-feature "
            "split of the margin is exact only for one-feature trees (train with "
            "feature_selection='cyclic'); use feature_importances for the others")
    owner = np.array([features[0] for features in tested], dtype=np.int64)
    out = np.zeros((X.shape[0], n_features, *ensemble.leaf_shape[1:]))
    scale = 1.0 if ensemble.answer_map is None else ensemble.answer_map[0]
    for f in np.unique(owner):
        mine = owner == f
        part = Ensemble(ensemble.depth, ensemble.is_categorical, 0.0,
                        ensemble.features[mine], ensemble.thresholds[mine],
                        ensemble.leaves[mine], n_outputs=ensemble.n_outputs,
                        shifts=ensemble.shifts)
        out[:, f] = scale * part.predict_margin(X)
    return out


def feature_importances(ensemble: Ensemble, n_features: int) -> np.ndarray:
    """Each feature's share (summing to 1) of the trees' mean absolute leaf values, a tree's
    share split by how many of its nodes test the feature."""
    n_internal = ensemble.features.shape[1]
    per_tree = np.abs(ensemble.leaves).reshape(ensemble.n_trees, -1).mean(axis=1)
    per_node = per_tree[:, None] / max(n_internal, 1)
    weights = np.zeros(n_features)
    np.add.at(weights, ensemble.features.ravel(),
              np.broadcast_to(per_node, ensemble.features.shape).ravel())
    total = weights.sum()
    return weights / total if total > 0 else weights
