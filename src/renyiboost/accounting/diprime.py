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

from typing import Literal

from pydantic import BaseModel, ConfigDict

from renyiboost.accounting.events import (
    ComposedEvent,
    ExponentialEvent,
    LaplaceEvent,
    PureDpEvent,
    SelfComposedEvent,
)


class DiPriMeBudget(BaseModel):
    """How one tree (and so the forest) spends ``epsilon``; see the module docstring."""

    model_config = ConfigDict(frozen=True)

    epsilon: float
    depth: int
    candidates: int  # K
    split_share: float  # ρ
    #: How the candidate is chosen: permute-and-flip is ε-DP but not ε-bounded-range, so
    #: its Rényi curve is the generic pure-DP one (:func:`~renyiboost.accounting.rdp.
    #: pure_dp_rdp`), not the exponential mechanism's ε²/8.
    selection: Literal["exponential", "permute_and_flip"] = "permute_and_flip"

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
        choice = (ExponentialEvent(self.select_epsilon) if self.selection == "exponential"
                  else PureDpEvent(self.select_epsilon))
        level = ComposedEvent((SelfComposedEvent(ExponentialEvent(self.median_epsilon),
                                                 self.candidates), choice))
        return ComposedEvent((SelfComposedEvent(level, self.depth),
                              LaplaceEvent(self.leaf_epsilon)))
