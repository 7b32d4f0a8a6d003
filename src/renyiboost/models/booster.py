"""The S-GBDT learner: DP initial score, random trees, DP leaves, individual Rényi filter.

Kirschte et al., "S-GBDT: Frugal Differentially Private Gradient Boosting Decision Trees"
(later "S-BDT"). One boosting round (Alg. 1 with the filter of Alg. 8):

1. every active record computes its clipped gradient and leaf-denominator contribution
   from its cached margin, hence its squared sensitivity s² (see
   :mod:`renyiboost.accounting.leaf`);
2. the individual Rényi filter decides who is eligible and charges them;
3. eligible records are Poisson-subsampled at rate γ (independent Bernoulli draws);
4. a random complete tree is grown from the public schema alone;
5. each leaf is released as −lr·(noisy Σ g)/(noisy Σ denominator + λ) (Alg. 4);
6. the cached margins of all active records are updated with the new tree.

A round is *planned* (:meth:`SGBDTBooster.plan_round`, which draws all randomness and
computes the new spent budgets) and then *applied* (:meth:`SGBDTBooster.apply_round`),
so a caller with a durable store can commit the charges between the two: a tree never
becomes visible before the budget it used is recorded.

Steps 1–3, the routing of step 5 and the leaf sums run as one compiled pass over the pool
(:mod:`renyiboost.models.kernels`), step 6 as a second. ``compiled=False`` runs the numpy
reference of the same round instead, which tests use as the oracle: with the same random
bits both give the same charges, leaf sums and margins.
"""

from __future__ import annotations

import dataclasses
import math
import warnings
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
from pydantic import ConfigDict, Field, model_validator

from renyiboost.accounting import (
    NOT_ELIGIBLE,
    Calibration,
    ChargeTable,
    IndividualRenyiFilter,
    LeafRelease,
    SplitGridRelease,
    calibrate,
    stage_calibrations,
)
from renyiboost.accounting.filter import charged_many
from renyiboost.accounting.inputs import Delta, OptionalEpsilon
from renyiboost.accounting.leaf import full_price
from renyiboost.exceptions import NonPrivateWarning, outside_stacklevel
from renyiboost.models import kernels
from renyiboost.models.grid import QuantileMap, histograms
from renyiboost.models.losses import LogisticLoss, SoftmaxLoss, SquaredLoss
from renyiboost.models.trees import (
    Ensemble,
    FeatureSelection,
    RandomTreeGrower,
    input_shifts,
    mains_tree_count,
)
from renyiboost.randomness import NoiseSource, noise_source
from renyiboost.release import MAX_TREE_DEPTH
from renyiboost.schema import PublicSchema
from renyiboost.settings import Settings

Task = Literal["regression", "classification"]


class SGBDTParams(Settings):
    """Hyper-parameters of the S-GBDT learner (validated once, at the boundary).

    Every number must be finite (``allow_inf_nan=False``): an infinite learning rate,
    clip or λ has no meaning. ε is a finite number > 0 or ``None``, δ a finite number in
    (0, :data:`~renyiboost.accounting.inputs.MAX_DELTA`] (:func:`~renyiboost.accounting.inputs.
    check_epsilon`, :func:`~renyiboost.accounting.inputs.check_delta`); neither may be a bool
    or a string.
    """

    model_config = ConfigDict(frozen=True, extra="forbid", allow_inf_nan=False)

    task: Task = "regression"
    epsilon: OptionalEpsilon = Field(1.0, description="target ε; None trains without privacy")
    delta: Delta = Field(1e-6, description="target δ: far below 1/n")
    rounds: int = Field(100, ge=1, description="nominal rounds T of a full-sensitivity record")
    max_rounds: int | None = Field(
        None, ge=1, description="total rounds incl. the filter's extra rounds (None: = rounds)"
    )
    depth: int = Field(4, ge=0, le=MAX_TREE_DEPTH)
    learning_rate: float = Field(0.1, gt=0)
    sampling_rate: float = Field(0.1, gt=0, le=1)
    count_share: float = Field(0.5, gt=0, lt=1, description="r1, leaf noise share of the count")
    init_share: float = Field(0.05, ge=0, lt=1, description="RDP share of the initial score")
    grid_share: float = Field(
        0.0, ge=0, lt=1,
        description="RDP share of a private split grid: noisy histograms of the numeric "
        "features, at whose quantiles the trees split (models.grid.QuantileMap; a batch "
        "fit's before its trees, a hinted stream's at its end; a stream without a hint buys "
        "one at finish() instead). 0: the trees split on the public bounds alone (the "
        "paper's learner)")
    grad_clip: float = Field(0.3, gt=0)
    hess_clip: float | None = Field(None, gt=0, le=0.25, description="Newton leaves if set")
    logistic_gradient: Literal["clipped", "proper"] = Field(
        "clipped",
        description="binary classification: 'clipped' clips p - y to grad_clip (S-GBDT), "
        "which pulls probabilities towards the majority class; 'proper' scales it by "
        "grad_clip / max(p, 1 - p), whose leaves settle at the true rate (models.losses."
        "LogisticLoss)")
    reg_lambda: float = Field(1.0, ge=0)
    reg_lambda_noise_stds: float = Field(
        0.0, ge=0,
        description="a dynamic leaf's λ is raised to this many standard deviations of its "
        "denominator's noise (the noisy count, or hessian sum, of the round's noise stage): "
        "λ = max(reg_lambda, this · σ). 0: reg_lambda alone (the paper's learner); the "
        "default policy's is models.defaults.LAMBDA_NOISE_STDS")
    leaf_clip: float | None = Field(None, gt=0)
    feature_selection: FeatureSelection = Field(
        "random",
        description="how a tree picks its features (models.trees.RandomTreeGrower): "
        "'random' a feature per node, 'cyclic' one feature per tree in turn, 'pairs' two "
        "features per tree, 'mains_then_pairs' one feature per tree for the first half of "
        "the nominal rounds (models.trees.MAINS_SHARE; at most mains_cycles a feature), "
        "pairs after")
    mains_cycles: int | None = Field(
        None, ge=1,
        description="'mains_then_pairs': at most this many one-feature trees for each "
        "feature before the pair trees (models.trees.mains_tree_count). None: half the "
        "nominal rounds alone; the default policy's is models.defaults.MAINS_CYCLES")
    split_candidates: int | None = Field(None, ge=1, le=65_536)
    smoothing: float = Field(
        0.0, ge=0, lt=1,
        description="answers average the trees over shifted copies of a row, each numeric "
        "feature moved across a window this share of its public range wide (models.trees."
        "input_shifts; free post-processing). 0: none, the paper's learner; the default "
        "policy's is models.defaults.INPUT_SMOOTHING")
    individual_filter: bool = True
    leaf_noise: Literal["dynamic", "static"] = Field(
        "dynamic",
        description="'dynamic': noisy sum / noisy count (DLNS, Alg. 4); 'static': noise on the "
        "leaf value at its worst-case sensitivity (SLN, the ablation baseline)",
    )
    negative_count: Literal["zero_leaf", "clamp"] = Field(
        "zero_leaf",
        description="a dynamic leaf whose noisy count (Newton: hessian sum) is <= 0: "
        "'zero_leaf' releases 0 (Alg. 4); 'clamp' takes the count as 0, so the noisy gradient "
        "sum still counts: -lr * noisy sum / lambda (post-processing either way)",
    )
    min_sensitivity2: float = Field(
        1 / 64, gt=0, le=1,
        description="charge floor: an admitted record pays at least the charge of s^2 = this "
        "(count leaves pay at least s^2 = count_share anyway), so every key retires after a "
        "bounded number of rounds, about rounds / floor, and memory stays bounded (Newton "
        "leaves would otherwise charge a well-fitted record almost nothing, forever)",
    )
    max_order: int = Field(4096, ge=2)
    trees_per_gradient: int = Field(
        1, ge=1, description="batched boosting (Maddock et al., CCS 2022): this many "
        "consecutive trees are grown from the same gradients, each leaf divided by it "
        "(batch fits only)")
    rdp_order: int | None = Field(
        None, ge=2, description="calibrate at this Rényi order instead of searching one (a "
        "candidate of a private selection: all runs share one order)")

    @model_validator(mode="after")
    def _check(self) -> SGBDTParams:
        if self.hess_clip is not None and self.task != "classification":
            raise ValueError("hess_clip (Newton leaves) applies to task='classification' only")
        if self.logistic_gradient != "clipped" and self.task != "classification":
            raise ValueError(f"logistic_gradient={self.logistic_gradient!r} applies to "
                             "task='classification' only")
        if self.leaf_noise == "static" and self.hess_clip is not None:
            raise ValueError("leaf_noise='static' needs count leaves: a Newton leaf's value has "
                             "no useful worst-case sensitivity; leave hess_clip unset")
        if self.leaf_noise == "static" and self.reg_lambda_noise_stds > 0:
            raise ValueError("reg_lambda_noise_stds needs leaf_noise='dynamic': a static leaf "
                             "has no noisy denominator to scale λ by")
        if self.init_share + self.grid_share >= 1:
            raise ValueError(f"init_share + grid_share must be < 1, got {self.init_share} + "
                             f"{self.grid_share}")
        if self.max_rounds is not None and self.max_rounds < self.rounds:
            raise ValueError(f"max_rounds must be >= rounds, got {self.max_rounds} < {self.rounds}")
        return self

    @property
    def private(self) -> bool:
        return self.epsilon is not None

    @property
    def total_rounds(self) -> int:
        return self.max_rounds if self.max_rounds is not None else self.rounds

    def calibrate(self) -> Calibration:
        """The noise calibration of a private model with these parameters
        (:func:`~renyiboost.accounting.calibration.calibrate` on its (ε, δ), rounds, shares
        and order): the booster's, and what a private selection compares at each order
        (:func:`~renyiboost.models.tuning.selection_budget`)."""
        if self.epsilon is None:
            raise ValueError("a non-private model (epsilon=None) has no noise calibration")
        return calibrate(epsilon=self.epsilon, delta=self.delta, rounds=self.rounds,
                         sampling_rate=self.sampling_rate, count_share=self.count_share,
                         init_share=self.init_share, max_order=self.max_order,
                         order=self.rdp_order, grid_share=self.grid_share)


def noisy_class_frequencies(codes: np.ndarray, n_classes: int, noise_std: float,
                            noise: NoiseSource) -> np.ndarray:
    """Class frequencies from a histogram of class indices with Gaussian noise of std
    ``noise_std`` on every count (none at 0): negative counts count as 0, and an empty
    histogram gives uniform frequencies. A record adds a one-hot vector (L2 norm 1), so at
    std ``σ/√2`` the histogram costs what one Gaussian release of noise multiplier ``σ/√2``
    costs it."""
    counts = np.bincount(np.asarray(codes, dtype=np.int64), minlength=n_classes).astype(float)
    if noise_std > 0:
        counts = noise.add_gaussian(counts, noise_std)
    counts = np.maximum(counts, 0.0)
    total = counts.sum()
    return counts / total if total > 0 else np.full(n_classes, 1.0 / n_classes)


@dataclass
class RecordPool:
    """Columnar state of the records the learner trains on (the active pool)."""

    X: np.ndarray  # (n, k) encoded features
    target: np.ndarray  # (n,) label on the loss's scale (a class index for multiclass)
    margin: np.ndarray  # (n,) cached ensemble margin; (n, C) for multiclass
    spent: np.ndarray  # (n,) spent RDP at the filter's order
    retired: np.ndarray  # (n,) bool: budget exhausted, never used again

    @classmethod
    def from_arrays(cls, X: np.ndarray, target: np.ndarray, init_margin: float = 0.0,
                    n_outputs: int = 1) -> RecordPool:
        """A fresh pool; ``n_outputs`` > 1 (multiclass) gives margins of shape ``(n, C)``."""
        n = X.shape[0]
        return cls(
            X=X,
            target=target,
            margin=np.full((n, n_outputs) if n_outputs > 1 else n, init_margin, dtype=float),
            spent=np.zeros(n, dtype=float),
            retired=np.zeros(n, dtype=bool),
        )

    def __len__(self) -> int:
        return int(self.target.shape[0])

    def check(self, n_features: int) -> None:
        """Refuse a pool whose arrays do not fit together or the schema: the compiled round
        reads them without bounds checks, and a pool of one column for a three-feature
        schema was routed on its neighbours' values and on memory past its end (the numpy
        round raised ``IndexError``: review B, 29 November)."""
        n = len(self)
        if self.X.ndim != 2 or self.X.shape[0] != n or self.X.shape[1] < n_features:
            raise ValueError(f"the pool's X must have shape ({n}, {n_features}), got "
                             f"{self.X.shape}")
        for name in ("margin", "spent", "retired"):
            if getattr(self, name).shape[0] != n:
                raise ValueError(f"the pool's {name} holds {getattr(self, name).shape[0]} "
                                 f"rows, its target {n}")


@dataclass(frozen=True)
class NoiseStage:
    """The noise of one stage of rounds: its calibration, leaf release and filter (all of
    a booster's stages share one order α̂ and one budget B, see
    :func:`~renyiboost.accounting.stage_calibrations`)."""

    calibration: Calibration
    release: LeafRelease
    filter: IndividualRenyiFilter


@dataclass(frozen=True)
class LeafSums:
    """The exact per-leaf sums over the sampled records of one round: the clipped
    gradients and the leaf denominators (counts, or clipped hessians for Newton leaves).
    What a shard sends its coordinator; shards' sums add up (``+``) to the pool's."""

    grad_sum: np.ndarray
    den_sum: np.ndarray

    def __add__(self, other: LeafSums) -> LeafSums:
        return LeafSums(self.grad_sum + other.grad_sum, self.den_sum + other.den_sum)


@dataclass(frozen=True)
class ReleasedTree:
    """A round's public output: the tree and its DP leaves, with the two Gaussian releases
    of every leaf (dynamic leaves) that the leaf values are post-processing of."""

    features: np.ndarray
    thresholds: np.ndarray
    leaves: np.ndarray
    noisy_grad_sum: np.ndarray | None = None
    noisy_count: np.ndarray | None = None


@dataclass(frozen=True)
class RoundOutcome:
    """Everything one planned round decided; applying it mutates pool and ensemble."""

    features: np.ndarray
    thresholds: np.ndarray
    leaves: np.ndarray
    leaf_of_record: np.ndarray  # leaf index of every pool record in the new tree
    spent: np.ndarray  # new spent RDP of every pool record
    retired: np.ndarray  # new retired mask
    n_eligible: int
    n_sampled: int
    codes: np.ndarray | None = None  # uint16 charge code of every pool record (private only)
    #: The two Gaussian releases of every leaf (dynamic leaves): the noisy clipped-gradient
    #: sum and the noisy count (or hessian sum). The leaf values are post-processing of them.
    noisy_grad_sum: np.ndarray | None = None
    noisy_count: np.ndarray | None = None
    #: :func:`~renyiboost.models.kernels.codes_digest` of the active records' codes.
    codes_digest: int | None = None

    @classmethod
    def of(cls, tree: ReleasedTree, **pool_side: Any) -> RoundOutcome:
        """A pool's outcome of a released tree: the tree with the pool's new arrays (from
        :meth:`SGBDTBooster.shard_round`)."""
        return cls(features=tree.features, thresholds=tree.thresholds, leaves=tree.leaves,
                   noisy_grad_sum=tree.noisy_grad_sum, noisy_count=tree.noisy_count,
                   **pool_side)


def check_fits_schema(params: SGBDTParams, schema: PublicSchema) -> None:
    """Refuse ``params`` that ``schema`` cannot be trained with (``ValueError``): public
    inputs only, so a batch fit and a private selection make this check before any budget
    is charged or any row read (a fit charged its ε, then failed here: review G2 #2; a
    selection failed here after several runs, at a point that depended on its hidden number
    of runs: review W #1)."""
    if params.task == "regression" and schema.target_bounds is None:
        raise ValueError("regression needs public target_bounds=(lo, hi); reading them from "
                         "the labels would leak them")
    if params.task == "classification" and schema.n_classes > 2:
        if params.logistic_gradient != "clipped":
            raise ValueError("logistic_gradient='proper' is for binary labels: a multiclass "
                             "gradient is clipped in L2 norm; leave it unset")
        if params.hess_clip is not None:
            raise ValueError("hess_clip (Newton leaves) is for binary labels: a multiclass "
                             "leaf divides by its noisy count; leave hess_clip unset")
    if params.grid_share > 0 and schema.n_numeric == 0:
        raise ValueError("grid_share buys a split grid for numeric features; this schema has "
                         "none, so leave grid_share at 0")


class SGBDTBooster:
    """The learner's mechanics over a :class:`RecordPool`; estimators wrap it.

    Parameters
    ----------
    params
        Hyper-parameters, see :class:`SGBDTParams`.
    schema
        The public schema; ``schema.target_bounds`` is required for regression.
    seed
        ``None`` (default) draws from the OS CSPRNG; an integer makes the run reproducible
        and marks the model as for testing only.
    compiled
        ``True`` (default): the compiled round; ``False``: the numpy reference (tests).
    stage_rounds
        Nominal rounds of the earlier noise stages of a stream (see
        :func:`~renyiboost.accounting.stage_calibrations`); a round names its stage in
        :meth:`plan_round`. Empty (default): every round has ``params.rounds``' noise.
    """

    def __init__(self, params: SGBDTParams, schema: PublicSchema, seed: int | None = None,
                 noise: NoiseSource | None = None, compiled: bool = True,
                 stage_rounds: tuple[int, ...] = ()) -> None:
        self.params = params
        self.schema = schema
        self.seed = seed
        self.noise: NoiseSource = noise if noise is not None else noise_source(seed)
        if not params.private:
            warnings.warn(
                "epsilon=None: this model learns without differential privacy (no noise, no "
                "accounting), so its trees and answers can reveal the training records; its "
                "privacy_guarantee() says private=False. Pass epsilon= for a private model.",
                NonPrivateWarning, stacklevel=outside_stacklevel())
        #: Whether earlier noise of this model came from a seed (a stream resumed from a
        #: store that was trained seeded): its guarantee then says ``seeded_for_testing``
        #: whatever :attr:`noise` is now.
        self.seeded_before = False
        check_fits_schema(params, schema)
        if params.task == "regression":
            lo, hi = schema.target_bounds  # type: ignore[misc]
            self.loss: SquaredLoss | LogisticLoss | SoftmaxLoss = SquaredLoss(
                lo, hi, params.grad_clip)
        elif schema.n_classes > 2:
            self.loss = SoftmaxLoss(schema.n_classes, params.grad_clip)
            # Multiclass rounds run the numpy reference (vectorised over records; the
            # compiled round pass is written for scalar margins).
            compiled = False
        else:
            self.loss = LogisticLoss(params.grad_clip, params.hess_clip,
                                     params.logistic_gradient)
        #: Margins per record: 1, or C for a multiclass (softmax) model.
        self.n_outputs = schema.n_outputs
        self.compiled = compiled
        self.count_sensitivity = params.hess_clip if params.hess_clip is not None else 1.0
        self.grower = RandomTreeGrower(
            schema, params.depth, params.feature_selection, params.split_candidates,
            mains_trees=mains_tree_count(params.rounds, schema.n_features, params.mains_cycles),
        )
        self.ensemble = Ensemble.for_schema(schema, params.depth, params.smoothing)
        self.calibration: Calibration | None = None
        #: The noise stages, earliest first; the last is the main one (``calibration``).
        self.stages: tuple[NoiseStage, ...] = ()
        if stage_rounds and not params.private:
            raise ValueError("stage_rounds are noise stages: they need a private model")
        if params.private:
            self.calibration = params.calibrate()
            # Count leaves: a = 1 for everyone, so s^2 >= r1; Newton leaves: s^2 can be ~0.
            natural_min = params.count_share if params.hess_clip is None else 0.0
            floor = max(natural_min, params.min_sensitivity2)
            if not params.individual_filter or params.leaf_noise == "static":
                # every record pays the full price (s² = 1): retired against it, or a key
                # that can no longer afford it stayed in the pool for good, never eligible
                # and never retired (review Q #4)
                floor = 1.0
            budget = self.calibration.budget_rdp  # one budget B for every stage

            calibrations = (*stage_calibrations(self.calibration, stage_rounds),
                            self.calibration)
            # Each stage's filter retires against the smallest charge of it and of every
            # later stage: a key an early (less noisy) stage cannot afford may fit the main
            # stage's smaller charges, so it is refused this round but stays active.
            filters = IndividualRenyiFilter.staged(
                budget, [ChargeTable.cached(cal.sigma, params.sampling_rate, cal.order)
                         for cal in calibrations], floor)
            self.stages = tuple(
                NoiseStage(cal, LeafRelease(cal.sigma, params.count_share,
                                            static=params.leaf_noise == "static"), flt)
                for cal, flt in zip(calibrations, filters, strict=True))
        #: The smoothing windows' spans a private split grid set (``None``: public ranges).
        self.smoothing_spans: np.ndarray | None = None
        self.rounds_done = 0
        self._uniforms = np.empty(0)  # the compiled round's Poisson uniforms, reused

    def __getstate__(self) -> dict[str, Any]:
        """A copy or pickle leaves out the last round's Poisson uniforms: which records
        that round sampled is secret (the subsampled Gaussian's amplification assumes it),
        and the buffer is only scratch space."""
        state = self.__dict__.copy()
        state["_uniforms"] = np.empty(0)
        return state

    # ------------------------------------------------------------------ initial score
    def initial_score(self, pool: RecordPool, public_count: float | None = None
                      ) -> tuple[float | np.ndarray, np.ndarray]:
        """DP initial score over the active pool and the records' new spent budgets.

        Multiclass: see :meth:`_class_prior_score` (``public_count`` is not needed there).

        Released as a depth-0 DP leaf over the scaled labels: (noisy Σ y) / (noisy n),
        with the leaf noise split of :class:`LeafRelease` at ``init_sigma``. n is *not*
        treated as public (S-GBDT's Alg. 6 does; that leaks the data set size).

        A stream passes ``public_count``, its positions so far: public (invariant 3) and
        never below the pool's size, since every pooled record took a position. Then n is
        not released at all and Σ y takes the whole noise scale
        (:meth:`LeafRelease.lone_sum_noise_std`), at the same worst-case charge. Labels that
        sit near a public bound (|mean| near 1 on the scaled axis, e.g. chick weights of
        35–373 g within 0–1,200 g) lose most: there the count's noise, times the mean,
        dominated the error of an initial score from the warm-up's ~100 records. Where keys
        repeat or events were dead-lettered, the pool is smaller than the positions and the
        score shrinks toward the bounds' midpoint by that ratio, a bias the trees correct.
        (Development suite, ``learn_one`` over 10 shuffles each, ε = 0.5 / 1 / 4: ChickWeights
        without a hint R² −0.36 / −0.25 / −0.09 → −0.19 / −0.02 / 0.22, with the hint −0.15 /
        0.25 / 0.43 → 0.25 / 0.46 / 0.46; TrumpApproval without a hint −16.7 (one shuffle at
        −140) / −0.16 / 0.26 → −0.03 / 0.05 / 0.23.)
        """
        active = ~pool.retired
        y = pool.target[active]
        total, count = float(y.sum()), float(y.size)
        spent = pool.spent.copy()
        cal = self.calibration
        if isinstance(self.loss, SoftmaxLoss):
            return self._class_prior_score(y, spent, active)
        if public_count is not None and public_count < count:
            raise ValueError(f"public_count {public_count} is below the pool's {int(count)} "
                             "active records")
        if cal is not None and cal.init_sigma is not None:
            spent[active] = charged_many(spent[active], cal.init_charge)
        if public_count is not None and cal is not None:
            return self.score_over_public_count(total, public_count), spent
        if cal is not None:
            if cal.init_sigma is None:
                return self._neutral_score(), spent
            init = LeafRelease(cal.init_sigma, self.params.count_share)
            total = float(self.noise.add_gaussian(total, init.sum_noise_std(1.0)))
            count = float(self.noise.add_gaussian(count, init.count_noise_std(1.0)))
        return self.score_of_mean(total, count), spent

    def release_split_grid(self, pool: RecordPool) -> np.ndarray:
        """Release the private split grid from the active pool and install it in the
        grower (:class:`~renyiboost.models.grid.QuantileMap`); returns the records' new
        spent budgets.

        Every active record pays the grid's charge in full (``Calibration.grid_charge``,
        :class:`~renyiboost.accounting.grid.SplitGridRelease`): it adds one count to a bin
        of every numeric feature's histogram whatever its values. Without privacy the
        histograms are exact and nothing is charged. A smoothed ensemble's windows then
        follow the grid (:meth:`~renyiboost.models.grid.QuantileMap.smoothing_spans`).
        """
        pool.check(self.schema.n_features)
        active = ~pool.retired
        spent = pool.spent.copy()
        if self.calibration is not None:
            spent[active] = charged_many(spent[active], self.calibration.grid_charge)
        self.install_split_grid(self.split_grid_of(histograms(self.schema, pool.X[active])))
        return spent

    def split_grid_of(self, counts: np.ndarray, charge: float | None = None) -> QuantileMap:
        """The split grid of exact histograms (:func:`~renyiboost.models.grid.histograms`,
        one pool's or the sum of a sharded stream's), with the noise that ``charge`` pays
        for (:class:`~renyiboost.accounting.grid.SplitGridRelease`; none without privacy)."""
        cal = self.calibration
        noise_std = 0.0
        if cal is not None:
            noise_std = SplitGridRelease(cal.grid_charge if charge is None else charge,
                                         cal.order, self.schema.n_numeric).count_noise_std
        return QuantileMap.from_counts(self.schema, counts, noise_std, self.noise)

    def install_split_grid(self, grid: QuantileMap) -> None:
        """Grow later trees on ``grid`` and smooth answers over its spans."""
        self.grower = dataclasses.replace(self.grower, quantile_map=grid)
        if self.params.smoothing > 0:
            self.smoothing_spans = grid.smoothing_spans()
            self.ensemble.shifts = input_shifts(self.schema, self.params.smoothing,
                                                spans=self.smoothing_spans)

    def score_over_public_count(self, total: float, public_count: float) -> float:
        """The initial score from the exact Σ y of the active records (summed over shards)
        and a public count at least their number: Σ y takes the whole noise scale
        (:meth:`LeafRelease.lone_sum_noise_std`). See :meth:`initial_score`."""
        cal = self.calibration
        if cal is None:
            raise ValueError("a public count stands in for a private one: without privacy the "
                             "exact count is known")
        if cal.init_sigma is None:
            return self._neutral_score()
        init = LeafRelease(cal.init_sigma, self.params.count_share)
        total = float(self.noise.add_gaussian(total, init.lone_sum_noise_std(1.0)))
        return self.score_of_mean(total, float(public_count))

    def score_of_mean(self, total: float, count: float) -> float:
        """The margin of the mean ``total / count`` of scaled labels (0 for no count)."""
        if count <= 0:
            return self._neutral_score()
        mean = total / count
        if isinstance(self.loss, SquaredLoss):
            return float(np.clip(mean, -1.0, 1.0))
        p = float(np.clip(mean, 0.01, 0.99))
        return math.log(p / (1.0 - p))

    def _neutral_score(self) -> float | np.ndarray:
        return 0.0 if self.n_outputs == 1 else np.zeros(self.n_outputs)

    def _class_prior_score(self, y: np.ndarray, spent: np.ndarray, active: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray]:
        """A multiclass initial score: centred log class frequencies from a noisy histogram.

        Every class count gets Gaussian noise of std ``init_sigma/√2``
        (:meth:`LeafRelease.lone_sum_noise_std` at sensitivity 1). A record adds a one-hot
        vector, L2 norm 1, so the histogram is one Gaussian mechanism at noise multiplier
        ``init_sigma/√2``: the worst-case charge the binary initial score costs
        (``init_charge``), and no count is released besides (the frequencies are the
        histogram normalised by its own sum). Frequencies are floored at 1 % before the log,
        as the binary score's mean is."""
        cal = self.calibration
        noise_std = 0.0
        if cal is not None:
            if cal.init_sigma is None:
                return self._neutral_score(), spent  # type: ignore[return-value]
            spent[active] = charged_many(spent[active], cal.init_charge)
            noise_std = LeafRelease(cal.init_sigma, self.params.count_share
                                    ).lone_sum_noise_std(1.0)
        frequencies = noisy_class_frequencies(y, self.n_outputs, noise_std, self.noise)
        log_p = np.log(np.maximum(frequencies, 0.01))
        return log_p - log_p.mean(), spent

    # ------------------------------------------------------------------ one round
    @property
    def release(self) -> LeafRelease | None:
        """The main stage's leaf release (``None`` without privacy)."""
        return self.stages[-1].release if self.stages else None

    @property
    def filter(self) -> IndividualRenyiFilter | None:
        """The main stage's individual Rényi filter (``None`` without privacy)."""
        return self.stages[-1].filter if self.stages else None

    def stage(self, index: int | None = None) -> NoiseStage | None:
        """Noise stage ``index`` (``None``: the main, last one); ``None`` without privacy."""
        if not self.stages:
            return None
        if index is None:
            return self.stages[-1]
        if not 0 <= index < len(self.stages):
            raise ValueError(f"noise stage {index} does not exist: this model has "
                             f"{len(self.stages)} stages")
        return self.stages[index]

    def plan_round(self, pool: RecordPool, leaf_depth: int | None = None,
                   gradient_margin: np.ndarray | None = None,
                   stage: int | None = None) -> RoundOutcome:
        """Draw and compute one round without changing any state (see module docstring).

        ``leaf_depth`` < ``depth`` releases the leaves of the tree's first ``leaf_depth``
        levels only (each released value repeated over the leaves below it), for a pool too
        small to fill ``2**depth`` leaves; it must be a function of public inputs.
        ``gradient_margin`` (batched boosting) computes the gradients — and so the charges —
        from these margins instead of the pool's current ones. ``stage`` is the noise stage
        of the round (a public function of the stream's positions; ``None``: the main one):
        its σ noises the leaves and its charge table charges the records.

        The round is the three parts a key-sharded deployment runs apart (S-GBDT's Sec. IX,
        Alg. 9: one aggregation per tree): the tree from public randomness
        (:meth:`grow_tree`), each shard's exact leaf sums and charges over its own records
        (:meth:`shard_round`), and the noise added once to the summed leaf sums
        (:meth:`release_round`)."""
        levels = self._levels(leaf_depth)
        features, thresholds = self.grow_tree()
        sums, pool_side = self.shard_round(pool, features, thresholds, levels, gradient_margin,
                                           stage)
        return RoundOutcome.of(self.release_round(features, thresholds, sums, levels, stage),
                               **pool_side)

    def _levels(self, leaf_depth: int | None) -> int:
        """The levels whose leaves a round releases: ``depth``, or ``leaf_depth`` within
        [0, depth] (checked on every path of a round: beyond it the leaf grouping's shift
        went negative without an error: review B)."""
        levels = self.params.depth if leaf_depth is None else int(leaf_depth)
        if not 0 <= levels <= self.params.depth:
            raise ValueError(f"leaf_depth must be in [0, {self.params.depth}], got {leaf_depth!r}")
        return levels

    def grow_tree(self) -> tuple[np.ndarray, np.ndarray]:
        """The next round's random complete tree, from the public schema and this booster's
        noise source alone (no record is read)."""
        return self.grower.grow(self.rounds_done, self.noise)

    def shard_round(self, pool: RecordPool, features: np.ndarray, thresholds: np.ndarray,
                    levels: int | None = None, gradient_margin: np.ndarray | None = None,
                    stage: int | None = None) -> tuple[LeafSums, dict[str, Any]]:
        """One pool's part of a round on the given tree: every active record's clipped
        gradient, charge and eligibility (steps 1–2), its Poisson draw from this booster's
        noise source (step 3) and the exact leaf sums of the sampled records; with the pool's
        new arrays (``spent``, ``retired``, ``leaf_of_record``, …) for :meth:`release_round`.

        Pools that partition the records give leaf sums that add up to the whole pool's
        (up to floating-point summation order) and the same per-record charges: a record's
        charge reads only its own row, margin and spent budget."""
        levels = self._levels(levels)
        pool.check(self.schema.n_features)
        margin = pool.margin if gradient_margin is None else gradient_margin
        noise_stage = self.stage(stage)
        if not self.compiled:
            return self._shard_numpy(pool, features, thresholds, levels, margin, noise_stage)
        rate = self.params.sampling_rate
        uniforms = np.empty(0)
        if rate < 1.0:
            n_active = len(pool) - int(np.count_nonzero(pool.retired))
            if self._uniforms.size < n_active:  # a buffer reused round after round
                self._uniforms = np.empty(max(n_active, int(1.25 * self._uniforms.size)))
            uniforms = self.noise.uniform_into(self._uniforms[:n_active])
        return self._charge_pass(pool, features, thresholds, margin, uniforms, rate, levels,
                                 noise_stage)

    def release_round(self, features: np.ndarray, thresholds: np.ndarray, sums: LeafSums,
                      levels: int | None = None, stage: int | None = None) -> ReleasedTree:
        """The round's DP leaves from its exact leaf sums (summed over shards): the noise of
        noise stage ``stage`` is drawn once here (step 5, Alg. 4)."""
        levels = self._levels(levels)
        if sums.grad_sum.shape[0] != 2**levels:
            raise ValueError(f"leaf sums of {sums.grad_sum.shape[0]} leaves for a round that "
                             f"releases {2**levels}")
        noise_stage = self.stage(stage)
        leaves, noisy_grad_sum, noisy_count = self._leaf_values(
            sums.grad_sum.copy(), sums.den_sum.copy(), levels,
            None if noise_stage is None else noise_stage.release)
        return ReleasedTree(features, thresholds, leaves, noisy_grad_sum, noisy_count)

    def _shard_numpy(self, pool: RecordPool, features: np.ndarray, thresholds: np.ndarray,
                     levels: int, margin: np.ndarray, stage: NoiseStage | None,
                     sample: bool = True) -> tuple[LeafSums, dict[str, Any]]:
        """The numpy reference of :meth:`shard_round`: one array pass per step (the
        multiclass round too). ``sample=False`` (a replay) draws no Poisson sample: the
        charges do not depend on it."""
        active = np.flatnonzero(~pool.retired)
        stats = self.loss.statistics(margin[active], pool.target[active])
        spent = pool.spent.copy()
        retired = pool.retired.copy()
        codes, digest = None, None
        if stage is not None:
            if self.params.individual_filter:
                s2 = stage.release.sensitivity2(stats.count_ratio, stats.grad_ratio)
            else:
                # everyone pays the full price (a NaN gradient is refused: full_price)
                s2 = full_price(stats.count_ratio, stats.grad_ratio)
            step = stage.filter.step(pool.spent[active], s2)
            eligible = step.eligible
            spent[active] = step.spent
            retired[active] = step.retired
            codes = np.full(len(pool), NOT_ELIGIBLE, dtype=np.uint16)
            codes[active] = step.codes
            digest = int(kernels.codes_digest(step.codes))
        else:
            eligible = np.ones(active.size, dtype=bool)
        sampled = eligible & (self.noise.bernoulli(self.params.sampling_rate, active.size)
                              if sample else False)
        leaf_of_active = self.ensemble.route_one_tree(pool.X[active], features, thresholds)
        leaf = leaf_of_active[sampled] >> (self.params.depth - levels)
        n_leaves = 2**levels
        grad = stats.grad[sampled]
        if grad.ndim == 1:
            grad_sum = np.bincount(leaf, grad, n_leaves).astype(float)
        else:  # vector leaves: one pass a class
            grad_sum = np.stack([np.bincount(leaf, grad[:, k], n_leaves)
                                 for k in range(grad.shape[1])], axis=1).astype(float)
        den_sum = np.bincount(leaf, stats.denominator[sampled], n_leaves).astype(float)
        leaf_of_record = np.zeros(len(pool), dtype=np.int64)
        leaf_of_record[active] = leaf_of_active
        return LeafSums(grad_sum, den_sum), {
            "leaf_of_record": leaf_of_record, "spent": spent, "retired": retired,
            "n_eligible": int(eligible.sum()), "n_sampled": int(sampled.sum()),
            "codes": codes, "codes_digest": digest}

    def _charge_pass(self, pool: RecordPool, features: np.ndarray, thresholds: np.ndarray,
                     margin: np.ndarray, uniforms: np.ndarray, sampling_rate: float,
                     levels: int, stage: NoiseStage | None,
                     ) -> tuple[LeafSums, dict[str, Any]]:
        """The compiled pass of a round (:func:`~renyiboost.models.kernels.round_pass`):
        the exact leaf sums and the pool side of its outcome. A replay passes rate 1 and no
        uniforms: the charges do not depend on the Poisson draw."""
        params, n = self.params, len(pool)
        n_leaves = 2**levels
        grad_sum, den_sum = np.zeros(n_leaves), np.zeros(n_leaves)
        leaf_of_record = np.empty(n, dtype=np.uint16)
        codes = np.empty(n, dtype=np.uint16)
        spent, retired = np.empty(n), np.empty(n, dtype=bool)
        flt = stage.filter if stage is not None else None
        table = flt.table.grid_charges if flt is not None else np.zeros(2)
        if isinstance(self.loss, SquaredLoss):
            loss = kernels.SQUARED
        else:
            loss = kernels.LOGISTIC if params.hess_clip is None else kernels.LOGISTIC_NEWTON
        n_eligible, n_sampled, digest = kernels.round_pass(
            pool.X, features, thresholds, self.ensemble.is_categorical, params.depth,
            margin, pool.target, pool.spent, pool.retired, loss, params.grad_clip,
            params.hess_clip or 1.0, params.logistic_gradient == "proper", flt is not None,
            not params.individual_filter or (stage is not None and stage.release.static),
            params.count_share, 1.0 - params.count_share, table,
            flt.min_sensitivity2 if flt is not None else 0.0,
            flt.budget_rdp if flt is not None else 0.0,
            flt.min_charge if flt is not None else 0.0,
            uniforms, sampling_rate, params.depth - levels,
            leaf_of_record, codes, spent, retired, grad_sum, den_sum)
        return LeafSums(grad_sum, den_sum), {
            "leaf_of_record": leaf_of_record, "spent": spent, "retired": retired,
            "n_eligible": n_eligible, "n_sampled": n_sampled,
            "codes": codes if flt is not None else None,
            "codes_digest": int(digest) if flt is not None else None}

    def replay_outcome(self, pool: RecordPool, features: np.ndarray, thresholds: np.ndarray,
                       leaves: np.ndarray, stage: int | None = None) -> RoundOutcome:
        """A committed round's outcome rebuilt from the state before it and its tree.

        The charges are a function of the committed state alone (margins, targets, spent
        budgets, the tree), so they are computed again, exactly as :meth:`plan_round` did;
        the caller compares :attr:`RoundOutcome.codes_digest` with the committed digest and
        refuses a replay that differs. No noise is drawn and the leaves are the committed ones.
        ``stage`` is the noise stage the round ran at.
        """
        pool.check(self.schema.n_features)
        if self.compiled:
            _, pool_side = self._charge_pass(pool, features, thresholds, pool.margin,
                                             np.empty(0), 1.0, self.params.depth,
                                             self.stage(stage))
        else:
            _, pool_side = self._shard_numpy(pool, features, thresholds, self.params.depth,
                                             pool.margin, self.stage(stage), sample=False)
        pool_side["n_sampled"] = 0
        return RoundOutcome(features=features, thresholds=thresholds, leaves=leaves,
                            **pool_side)  # type: ignore[arg-type]

    def leaf_lambda(self, release: LeafRelease | None) -> float:
        """λ of a dynamic leaf released with ``release`` (``None``: without noise):
        ``max(reg_lambda, reg_lambda_noise_stds · σ)``, σ the noise std of the leaf's
        noisy count (Newton: hessian sum) in that release.

        λ keeps a leaf's denominator away from zero where its noisy count is small against
        the noise, and shrinks a leaf towards 0 the fewer records it has. A fixed λ cannot do
        both at every ε: the denominator's noise std grows like 1/ε (about 60 at ε = 0.5, 9
        at ε = 4 for the classification policy's trees), so a λ right for ε = 4 lets noise
        through at ε = 0.5, and one right for ε = 0.5 over-shrinks at ε = 4. Scaling it by
        σ keeps the ratio. σ is public (a function of the parameters and the noise stage),
        so this is post-processing of the two noisy sums: the charges and the guarantee do
        not change. Each noise stage of a stream has its own σ, so its own λ. Not in
        S-GBDT, whose λ is a constant; the policy's choice of the multiple is
        :data:`~renyiboost.models.defaults.LAMBDA_NOISE_STDS`."""
        params = self.params
        if release is None or params.reg_lambda_noise_stds == 0:
            return params.reg_lambda
        return max(params.reg_lambda, params.reg_lambda_noise_stds
                   * release.count_noise_std(self.count_sensitivity))

    def _leaf_values(
        self, grad_sum: np.ndarray, den_sum: np.ndarray, levels: int,
        release: LeafRelease | None,
    ) -> tuple[np.ndarray, np.ndarray | None, np.ndarray | None]:
        """DP leaves (Alg. 4): −lr·(Σg + noise)/(Σden + noise + λ) (λ from
        :meth:`leaf_lambda`), with the two noisy sums
        (``None`` for static leaves, which release the value itself).

        A leaf whose noisy count (or hessian sum) is ≤ 0 is 0 (``negative_count='zero_leaf'``,
        the foundation issue's rule and the official code's ``cut_off_leaf_denom``), or the
        count is taken as 0, its nearest feasible value (``'clamp'``), so the noisy gradient
        sum still counts. Both are post-processing of the two releases; neither costs
        privacy. Which is better depends on λ against the count noise. At small ε a negative
        noisy count is common: with the committed Abalone ε = 0.15 config (count noise std
        22.6, about 17 sampled records per leaf) it was negative for 32 % of 3,000 leaves in
        five fits. There λ = 100, so Σ̃g/λ is a tame estimate, and 'clamp' raised validation
        R² by 0.0095 ± 0.0011 (32 noise seeds, same draws, training rows only). With a small
        λ, Σ̃g/λ is mostly amplified noise: on the stream grid's regression streams (demo
        parameters, λ = 30) 'clamp' raised the prequential MAE (FriedmanDrift 3.31 → 3.56).

        With ``leaf_noise='static'`` (SLN): −lr·(Σg/(Σden + λ) + noise), see
        :meth:`LeafRelease.static_value_noise_std`.

        ``grad_sum`` and ``den_sum`` are the exact sums over the sampled records of each of
        the ``2**levels`` released leaves (arrays of the caller's round: the noise is added
        into them). With ``levels`` < depth the leaves are grouped by
        their ancestor on level ``levels`` (heap order: leaf ``i``'s ancestor is
        ``i >> (depth − levels)``) and each group is released as one leaf. A record is still
        in exactly one released leaf, so the round costs what a full tree costs; the noisy
        sums returned are the groups'.
        """
        params = self.params
        shift = params.depth - levels
        noisy_sums: tuple[np.ndarray | None, np.ndarray | None] = (None, None)
        # Vector leaves (multiclass): grad_sum is (leaves, C), one count a leaf; every
        # coordinate of the sum gets the scalar sum's noise (see losses.SoftmaxLoss).
        column = (slice(None),) + (None,) * (grad_sum.ndim - 1)  # den_sum against grad_sum
        if params.leaf_noise == "static":
            # Σg/(n + λ) on the sampled records (0 for an empty leaf when λ = 0), then noise
            den = (den_sum + params.reg_lambda)[column]
            values = np.divide(grad_sum, den, out=np.zeros(grad_sum.shape), where=den > 0)
            if release is not None:
                values = self.noise.add_gaussian(values, release.static_value_noise_std(
                    params.grad_clip, params.reg_lambda))
            values *= -params.learning_rate
        else:
            reg_lambda = self.leaf_lambda(release)
            if release is not None:
                sum_std = release.sum_noise_std(params.grad_clip)
                grad_sum = self.noise.add_gaussian(grad_sum, sum_std)
                den_sum = self.noise.add_gaussian(
                    den_sum, release.count_noise_std(self.count_sensitivity))
            noisy_sums = (grad_sum.copy(), den_sum.copy())
            if params.negative_count == "clamp":
                den_sum = np.maximum(den_sum, 0.0)
                keep = den_sum + reg_lambda > 0
            else:
                keep = den_sum > 0
            values = np.divide(-params.learning_rate * grad_sum,
                               (den_sum + reg_lambda)[column], out=np.zeros(grad_sum.shape),
                               where=np.broadcast_to(keep[column], grad_sum.shape))
        if params.trees_per_gradient > 1:  # one of a batch of trees on the same gradients
            values = values / params.trees_per_gradient
        if params.leaf_clip is not None:
            values = np.clip(values, -params.leaf_clip, params.leaf_clip)
        if shift:
            values = np.repeat(values, 2**shift, axis=0)
        return values, *noisy_sums

    def advance(self, pool: RecordPool, outcome: RoundOutcome) -> RecordPool:
        """The pool after ``outcome``, as new arrays; ``pool`` itself is left unchanged.

        A durable caller commits these arrays before :meth:`append_tree` makes the tree
        visible (DEVELOPERS invariant 2).
        """
        if self.compiled:
            margin = np.empty_like(pool.margin)
            kernels.margin_pass(pool.margin, outcome.leaves, outcome.leaf_of_record,
                                outcome.retired, margin)
        else:
            active = ~outcome.retired
            margin = pool.margin.copy()
            margin[active] += outcome.leaves[outcome.leaf_of_record[active]]
        return RecordPool(pool.X, pool.target, margin, outcome.spent, outcome.retired)

    def append_tree(self, outcome: RoundOutcome) -> None:
        """Make a planned round's tree visible to prediction."""
        self.ensemble.append(outcome.features, outcome.thresholds, outcome.leaves)
        self.rounds_done += 1

    def apply_round(self, pool: RecordPool, outcome: RoundOutcome) -> None:
        """Make a planned round visible: append the tree, update margins and budgets. Leaves
        of another shape are refused before the pool changes (the compiled margin pass read
        past them, and the pool kept margins of that read: review B)."""
        if outcome.leaves.shape != self.ensemble.leaf_shape:
            raise ValueError(f"the round's leaves have shape {outcome.leaves.shape}, the "
                             f"ensemble's trees {self.ensemble.leaf_shape}")
        after = self.advance(pool, outcome)
        pool.margin, pool.spent, pool.retired = after.margin, after.spent, after.retired
        self.append_tree(outcome)
