"""DiPriMe's budget (Consul & Williamson, "Balance is key: Private median splits yield
high-utility random trees", arXiv 2006.08795), corrected.

A forest of ``T`` trees, each on its own rows (parallel composition: every tree gets the
whole ε). Inside a tree of depth ``D`` the nodes of a level are disjoint; at each node ``K``
candidate features each get a DP median (an exponential mechanism on the *same* rows) and
one more exponential mechanism chooses among them, so a row pays per level

    K · ε_median + ε_select = ε · ρ / D,   here  ε_median = ε_select = ε ρ / (D (K + 1)),

and ``ε (1 − ρ)`` at its leaf. **Correction:** the authors' code (shoryaconsul/
DiPriMeFlip_Forest) draws the K medians at ε ρ / (2D) each and the choice at ε ρ / (2D), but
charges ε ρ / D a level — ``ε (1 − ρ) + ε ρ (K + 1) / 2`` spent in all, twice the stated ε
at K = 5, ρ = 0.5. Here the K medians are charged, each of them.
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict

from renyiboost.accounting.events import (
    ComposedEvent,
    ExponentialEvent,
    LaplaceEvent,
    SelfComposedEvent,
)


class DiPriMeBudget(BaseModel):
    """How one tree (and so the forest) spends ``epsilon``; see the module docstring."""

    model_config = ConfigDict(frozen=True)

    epsilon: float
    depth: int
    candidates: int  # K
    split_share: float  # ρ

    @property
    def median_epsilon(self) -> float:
        return self.epsilon * self.split_share / (self.depth * (self.candidates + 1))

    @property
    def select_epsilon(self) -> float:
        return self.median_epsilon

    @property
    def leaf_epsilon(self) -> float:
        return self.epsilon * (1.0 - self.split_share)

    def spent_epsilon(self) -> float:
        return (self.depth * (self.candidates * self.median_epsilon + self.select_epsilon)
                + self.leaf_epsilon)

    def event(self) -> ComposedEvent:
        level = ComposedEvent((SelfComposedEvent(ExponentialEvent(self.median_epsilon),
                                                 self.candidates),
                               ExponentialEvent(self.select_epsilon)))
        return ComposedEvent((SelfComposedEvent(level, self.depth),
                              LaplaceEvent(self.leaf_epsilon)))
