"""DPBoost's budget and sensitivities (Li, Wu, Wen & He, "Privacy-Preserving Gradient
Boosting Decision Trees", AAAI 2020), corrected where the paper or its code is wrong.

DPBoost is pure ε-DP. Its trees are grouped into *ensembles* of ``T_e`` trees, each trained
on a disjoint part of the rows (parallel composition inside an ensemble); the ``⌈T / T_e⌉``
ensembles compose sequentially. Inside one tree of depth ``D`` the nodes of a level are
disjoint, so a row meets one exponential-mechanism split per level and one Laplace leaf:

* ``ε_ensemble = ε / ⌈T / T_e⌉``;
* leaves: ``ε_leaf = ε_ensemble / 2``;
* splits: ``ε_node = ε_ensemble / (2 D)`` per level.

(The authors' code, QinbinLi/DPBoost ``serial_tree_learner.cpp``, divides the node budget
by 2 once more and so spends 3ε/4; we spend what the guarantee states.)

Gradients are bounded by ``g*`` (rows with ``|g| > g*`` are left out of that tree: the
paper's gradient-based data filtering), which bounds

* the split gain ``G = G_L² / (n_L + λ) + G_R² / (n_R + λ)``: :func:`gain_sensitivity`,
  ``3 g*²`` — **a correction** of the paper's Lemma 1, whose bound is what a one-row node
  gives (``(3λ + 2) g*² / ((2 + λ)(1 + λ))``, ≈ 0.996 g*² at λ = 0.1; the authors' code
  moved to 3 g*² in November 2020): with ``G_L = n g*`` and a row of gradient ``−g*`` added,
  the change tends to ``3 g*²`` as ``n`` grows (``tests/test_dpboost.py`` finds 2.996 g*² at
  ``n = 1000``, λ = 0.1, by brute force);
* a leaf ``V = −Σg / (n + λ)``: at most ``g* / (1 + λ)`` (reached at n = 0 and 1), and after
  *geometric leaf clipping* of tree ``t`` (0-based inside its ensemble) to
  ``±g* (1 − η)^t``, at most twice that: :func:`leaf_sensitivity`.

For composition with Gaussian mechanisms the guarantee also has an RDP curve: the Laplace
leaves by :func:`~renyiboost.accounting.rdp.laplace_rdp`, the exponential mechanism by
:func:`~renyiboost.accounting.rdp.exponential_rdp`.
"""

from __future__ import annotations

import math

import numpy as np
from pydantic import BaseModel, ConfigDict

from renyiboost.accounting.events import (
    ComposedEvent,
    ExponentialEvent,
    LaplaceEvent,
    SelfComposedEvent,
)


def gain_sensitivity(g_star: float) -> float:
    """Sensitivity of DPBoost's split gain under adding or removing one row with
    ``|g| ≤ g*``: ``3 g*²`` (the supremum over node sizes; see the module docstring)."""
    return 3.0 * g_star**2


def leaf_clip(g_star: float, learning_rate: float, tree_in_ensemble: int) -> float:
    """Geometric leaf clipping: tree ``t`` of an ensemble clips its leaves (before the
    learning rate) to ``±g* (1 − η)^t`` (the gradients of a converging ensemble shrink)."""
    return g_star * (1.0 - learning_rate) ** tree_in_ensemble


def leaf_sensitivity(g_star: float, reg_lambda: float, learning_rate: float,
                     tree_in_ensemble: int) -> float:
    """Sensitivity of one clipped leaf ``clip(−Σg / (n + λ))``:
    ``min(g* / (1 + λ), 2 g* (1 − η)^t)``.

    >>> round(leaf_sensitivity(1.0, 0.1, 0.1, 0), 4), round(leaf_sensitivity(1.0, 0.1, 0.1, 20), 4)
    (0.9091, 0.2432)
    """
    return min(g_star / (1.0 + reg_lambda),
               2.0 * leaf_clip(g_star, learning_rate, tree_in_ensemble))


class DPBoostBudget(BaseModel):
    """How DPBoost spends ``epsilon`` (see the module docstring)."""

    model_config = ConfigDict(frozen=True)

    epsilon: float
    rounds: int
    trees_per_ensemble: int
    depth: int

    @property
    def n_ensembles(self) -> int:
        return math.ceil(self.rounds / self.trees_per_ensemble)

    @property
    def ensemble_epsilon(self) -> float:
        return self.epsilon / self.n_ensembles

    @property
    def leaf_epsilon(self) -> float:
        return self.ensemble_epsilon / 2.0

    @property
    def node_epsilon(self) -> float:
        """ε of one split's exponential mechanism (one a level: the levels compose)."""
        return self.ensemble_epsilon / (2.0 * self.depth) if self.depth else 0.0

    def event(self) -> ComposedEvent:
        """What a row is exposed to: per ensemble one tree's splits and leaf."""
        one_tree = ComposedEvent((SelfComposedEvent(ExponentialEvent(self.node_epsilon),
                                                    self.depth),
                                  LaplaceEvent(self.leaf_epsilon)))
        return ComposedEvent((SelfComposedEvent(one_tree, self.n_ensembles),))

    def spent_epsilon(self) -> float:
        """The pure-DP total by basic composition (equals ``epsilon``)."""
        return self.n_ensembles * (self.depth * self.node_epsilon + self.leaf_epsilon)


def ensemble_shares(trees: int, learning_rate: float, balanced: bool) -> np.ndarray:
    """The share of an ensemble's rows that each of its ``trees`` trees gets: equal
    (``balanced``), or ``η (1 − η)^t`` normalised (the paper's Alg. 2: early trees, whose
    leaves are clipped least, get more rows)."""
    if balanced:
        return np.full(trees, 1.0 / trees)
    weights = learning_rate * (1.0 - learning_rate) ** np.arange(trees)
    return weights / weights.sum()
