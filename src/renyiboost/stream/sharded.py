"""Key-sharded training: one coordinator, several shards, one global model.

S-GBDT needs the records of a round only through the per-leaf sums of its sample (Kirschte
et al., Sec. IX, Alg. 9: one aggregation per tree), so a round splits into

* the **coordinator**: the public schedule (from the total of the shards' positions), the
  round's noise stage and leaf depth, the random tree (public randomness), the noise added
  once to the summed leaf sums, and the model;
* the **shards**: each a :class:`~renyiboost.stream.engine.StreamEngine` in ``coordinated``
  mode holding the pool, ledger, keys and source offsets of its keys, in its own state
  store; per round it charges its active records, draws its own Poisson sample and returns
  its exact leaf sums (:meth:`~renyiboost.stream.engine.StreamEngine.shard_sums`).

A key lives on exactly one shard (:func:`shard_of`, a hash of its normalised name), so it
has one ledger. Here the shards run in this process; the shard interface is the
``StreamEngine`` methods ``flush``, ``initial_sum``, ``install_initial``, ``shard_sums``,
``install_released`` and ``replay_released``, which a remote shard (an actor on another
machine) answers the same way.

**Durable before visible** (invariant 4), per round:

1. every shard commits its merged records (``flush``) before it computes sums, so a shard
   can always recompute its charges of a round from its committed state and the round's
   tree: a round's charges are a function of both (the store's event sourcing);
2. the coordinator adds the noise once and hands the released tree to every shard, which
   commits its charges, retirements and the tree in one transaction;
3. only when every shard's commit returned does the tree join the coordinator's model.

A crash between two shards' commits leaves the shards at different rounds. Opening the
engine again **reconciles** them: a shard behind replays the missing rounds from the tree
another shard committed, computing its charges from its committed state exactly as the
round did (:meth:`~renyiboost.stream.engine.StreamEngine.replay_released`) — never a round
whose sums included records it does not hold, because step 1 committed them first. A crash
before any shard committed the round loses it: it was never visible.
"""

from __future__ import annotations

import copy
import functools
import zlib
from collections.abc import Sequence
from typing import Any

import numpy as np

from renyiboost.exceptions import LedgerConflict
from renyiboost.models.booster import LeafSums, SGBDTBooster
from renyiboost.stream.engine import (
    EngineConfig,
    KeyBudget,
    StreamEngine,
    leaf_depth_at,
    noise_stage_at,
    run_rounds,
    trees_due,
    trigger_schedule,
)
from renyiboost.stream.store import StateStore
from renyiboost.validation import normalise_key


def shard_of(key: Any, n_shards: int) -> int:
    """The shard that owns ``key``: CRC-32 of its normalised name, modulo ``n_shards``
    (stable across processes and versions, unlike Python's salted ``hash``)."""
    return zlib.crc32(normalise_key(key).encode()) % n_shards


class ShardedEngine:
    """A coordinator over ``len(stores)`` key shards, each with its own state store.

    Parameters
    ----------
    config
        As for :class:`~renyiboost.stream.engine.StreamEngine`; every shard gets the same
        (its store pins it).
    stores
        One store (or location) per shard; their order is the shard map and must stay the
        same for the life of the deployment.
    seed
        ``None`` (default): CSPRNG noise. An integer seeds the coordinator (trees and leaf
        noise, as a single engine with that seed) and each shard's Poisson draws (testing
        only).
    """

    def __init__(self, config: EngineConfig, stores: Sequence[StateStore | str | None],
                 seed: int | None = None) -> None:
        if len(stores) < 1:
            raise ValueError("a sharded engine needs at least one store")
        self.config = config
        self.shards = [StreamEngine(config, store=store, coordinated=True,
                                    seed=None if seed is None else seed + 1 + k)
                       for k, store in enumerate(stores)]
        self.booster = SGBDTBooster(config.params, config.public_schema, seed, stage_rounds=tuple(
            stage.rounds for stage in config.noise_stages))
        self.schedule = trigger_schedule(config)
        self._check_shard_map()
        self._reconcile()
        self._positions = sum(shard.positions for shard in self.shards)
        self._next_trigger = self.schedule.next_after(self._positions)
        self._keyless = 0

    # ------------------------------------------------------------------ opening
    def _check_shard_map(self) -> None:
        """Each store records its place in the shard map at the first open; a store in
        another place (reordered, or from another deployment) is refused."""
        n = len(self.shards)
        for k, shard in enumerate(self.shards):
            place = {"shard": k, "of": n}
            stored = shard.store.get_meta("shard_map")
            if stored is None:
                shard.store.set_meta("shard_map", place)
            elif stored != place:
                raise LedgerConflict(
                    f"the store {shard.store!r} holds shard {stored['shard']} of "
                    f"{stored['of']}, not shard {k} of {n}: its keys' ledgers belong there. "
                    "Open the stores in their original order; changing the number of shards "
                    "needs a reshard that moves the affected ledgers.")

    def _reconcile(self) -> None:
        """Bring every shard to the furthest shard's round (see the module docstring). A
        shard is at most one round behind: a round starts only after every shard committed
        the one before."""
        leader = max(self.shards, key=lambda shard: shard.rounds_done)
        if leader.initialized:
            for shard in self.shards:
                if not shard.initialized:
                    shard.install_initial(leader.ensemble.init_score)
        ens = leader.ensemble
        # The round's public positions: every shard committed its records before the round.
        stage = noise_stage_at(self.config, sum(shard.positions for shard in self.shards))
        for k, shard in enumerate(self.shards):
            behind = leader.rounds_done - shard.rounds_done
            if behind > 1:
                raise LedgerConflict(
                    f"shard {k} ({shard.store!r}) is {behind} rounds behind shard "
                    f"{self.shards.index(leader)}; shards of one deployment are never more "
                    "than one round apart, so these stores were not written together")
            if behind == 1:
                last = ens.n_trees - 1
                shard.replay_released(ens.features[last], ens.thresholds[last],
                                      ens.leaves[last], stage)
        self._durable()
        self.booster.ensemble = copy.deepcopy(leader.ensemble)
        self.booster.rounds_done = leader.rounds_done
        self._initialized = leader.initialized

    # ------------------------------------------------------------------ records
    @property
    def positions(self) -> int:
        return self._positions

    def add_one(self, row: np.ndarray, label: float, key: Any = None) -> None:
        """One encoded row at the next position, to the shard that owns ``key`` (a record
        without a key goes to the shards in turn)."""
        if key is None:
            shard = self._keyless % len(self.shards)
            self._keyless += 1
        else:
            shard = shard_of(key, len(self.shards))
        self.shards[shard].add_one(row, label, key)
        self._positions += 1
        if self._positions >= self._next_trigger:
            position = self._positions
            self._next_trigger = self.schedule.next_after(position)
            self.train(trees_due(self.config, self.schedule, position))

    # ------------------------------------------------------------------ rounds
    def train(self, rounds: int = 1) -> int:
        """Run ``rounds`` rounds over all shards (the initial score first, once ``warmup``
        positions have passed); returns the trees added."""
        for shard in self.shards:
            shard.flush()  # step 1: what a round reads is committed before any sum leaves
        if not self._initialized:
            if self._positions < self.config.warmup:
                return 0
            total = sum(shard.initial_sum() for shard in self.shards)
            if self.booster.calibration is None:  # no privacy: the exact count
                score = self.booster.score_of_mean(total, sum(s.n_active for s in self.shards))
            else:
                score = self.booster.score_over_public_count(total, self._positions)
            for shard in self.shards:
                shard.install_initial(score)
            self._durable()
            self.booster.ensemble.init_score = score
            self._initialized = True
        return run_rounds(self.config, self.booster, self._round, rounds)

    def _round(self) -> None:
        stage = noise_stage_at(self.config, self._positions)
        levels = leaf_depth_at(self.config, self.booster, self._positions, stage)
        features, thresholds = self.booster.grow_tree()
        sums = functools.reduce(LeafSums.__add__, (
            shard.shard_sums(features, thresholds, levels, stage) for shard in self.shards))
        tree = self.booster.release_round(features, thresholds, sums, levels, stage)
        for shard in self.shards:
            shard.install_released(tree, stage)  # step 2: each commits its charges and the tree
        self._durable()  # step 3: only then is the tree the model's
        ens = self.booster.ensemble
        ens.append(tree.features, tree.thresholds, tree.leaves)
        self.booster.rounds_done += 1
        max_trees = self.config.max_trees
        if max_trees is not None and ens.n_trees > max_trees:
            ens.keep_last(max_trees)

    def _durable(self) -> None:
        for shard in self.shards:
            shard.wait_durable()

    # ------------------------------------------------------------------ reading
    @property
    def release_version(self) -> int:
        return self.booster.rounds_done + int(self._initialized)

    def predict_margin(self, X: np.ndarray) -> np.ndarray:
        """The model's margin for encoded rows (only trees every shard committed)."""
        return self.booster.ensemble.predict_margin(np.asarray(X, dtype=float))

    def spent_rdp(self) -> np.ndarray:
        """Spent RDP of every key of every shard (operator telemetry)."""
        return np.concatenate([shard.spent_rdp() for shard in self.shards])

    def operator_budget_of(self, key: Any) -> KeyBudget:
        """A key's budget, from the shard that owns it (operator telemetry)."""
        return self.shards[shard_of(key, len(self.shards))].operator_budget_of(key)

    def close(self) -> None:
        for shard in self.shards:
            shard.close()
