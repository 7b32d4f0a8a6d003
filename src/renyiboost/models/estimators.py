"""River estimators: thin shells over :class:`~renyiboost.stream.engine.StreamEngine`.

``SGBDTRegressor`` and ``SGBDTClassifier`` (binary) speak River's ``learn_one`` /
``predict_one`` and mini-batch APIs; all the work — the pool, the filter, the rounds and the
store — is the engine's.
"""

from __future__ import annotations

import sys
import warnings
from collections.abc import Iterator, Mapping
from types import FrameType
from typing import Any

import numpy as np
from river import base

from renyiboost.accounting.budget import PrivacyAccountant
from renyiboost.exceptions import (
    BudgetExceeded,
    InvalidRecord,
    PrivacyLeakWarning,
    SchemaMismatchWarning,
    outside_stacklevel,
    plain_argument_errors,
)
from renyiboost.models.defaults import POLICY, Policy
from renyiboost.models.losses import class_codes, class_probabilities
from renyiboost.models.recalibration import RecalibrationPolicy
from renyiboost.release import ModelRelease, PrivacyGuarantee
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig, KeyBudget, OperatorTelemetry, StreamEngine
from renyiboost.stream.store import StateStore
from renyiboost.validation import normalise_key, require_aligned, rows_not_learned, vector

#: The keywords whose default is the policy's value (:data:`POLICY`); ``None`` keeps its own
#: meaning for those that have one (``hess_clip=None``: count leaves, ``leaf_clip=None``: no
#: clipping, ``split_candidates=None``: continuous thresholds).
_POLICY_ARGUMENTS = (
    "rounds", "depth", "learning_rate", "sampling_rate", "count_share", "init_share",
    "grad_clip", "hess_clip", "reg_lambda", "reg_lambda_noise_stds", "leaf_clip",
    "feature_selection", "mains_cycles", "split_candidates", "smoothing", "grid_share",
    "logistic_gradient", "train_every", "trees_per_trigger", "warmup", "trigger_growth",
    "max_train_every", "max_train_every_beyond_end", "final_trees", "noise_stages",
    "recalibration",
)


def _learned_steps(steps: Any, model: Any) -> list[str]:
    """Names of the steps before ``model`` in a River pipeline's ``steps`` whose
    ``learn_one`` learns from the data (any but River's stateless ``Transformer.learn_one``;
    a ``TransformerUnion`` by its members)."""
    from river import base, compose

    learned = []
    for name, step in steps.items():
        if step is model:
            break
        if isinstance(step, compose.TransformerUnion):
            learned += [f"{name}: {inner}" for inner in
                        _learned_steps(dict(step.transformers), None)]
        elif getattr(type(step), "learn_one", base.Transformer.learn_one) is not (
                base.Transformer.learn_one):
            learned.append(str(name))
    return learned


def _composition_risk(wrapper: Any, model: Any) -> str | None:
    """Why River's ``wrapper`` driving ``model`` spends more than ``model``'s ε says, or
    ``None`` (see :meth:`_SGBDTEstimator._check_wrapper`)."""
    from river import base, compose
    from river.model_selection.base import ModelSelector

    kind = type(wrapper).__name__
    if isinstance(wrapper, ModelSelector):
        if model._drawn_from is not None:
            return None
        return (f"is a candidate of River's {kind}: every candidate learns from the same "
                "records, so together they spend the sum of their ε, not the ε each reports. "
                "Draw them from one renyiboost.accounting.budget.PrivacyAccountant "
                "(draw_from), or select privately with `renyiboost tune --private`.")
    module = type(wrapper).__module__ or ""
    if module.startswith(("river.ensemble", "river.multiclass", "river.forest")):
        return (f"is a member of River's {kind}: every member learns from the same records, "
                "so together they spend the sum of their ε, not the ε each reports, and a "
                "member that sees a record several times (bagging) gives it a fresh budget "
                "each time. Train one renyiboost model instead (multiclass: labels=[...]).")
    if isinstance(wrapper, compose.Pipeline):
        if learned := _learned_steps(wrapper.steps, model):
            return (f"follows learned steps of a River pipeline ({', '.join(learned)}): "
                    "their running statistics change every later record's features, which "
                    "the per-record accounting does not cover. Only stateless transforms "
                    "(compose.Select, FuncTransformer, ...) may precede the model; scale with "
                    "public constants instead.")
        return None
    if (isinstance(wrapper, base.Base) and wrapper is not model
            and type(wrapper) is not compose.TargetTransformRegressor):
        return (f"is driven by River's {kind} ({module}), whose learn_one decides from the "
                "data which records the model learns, how often, or with which labels (a "
                "sampler repeats or drops records by their label; a target scaler moves "
                "every label by running statistics, which reads the target's bounds from "
                "the data). The guarantee covers records passed on once each, as given, at "
                "positions that do not depend on the data: feed the model directly (a "
                "pipeline of stateless steps, or compose.TargetTransformRegressor with a "
                "fixed function, may wrap it).")
    return None


class _SGBDTEstimator:
    """Shared constructor, learning and reporting of the two estimators."""

    _task: str = "regression"

    def __init__(
        self,
        features: Mapping[str, Any],
        target_bounds: tuple[float, float] | None = None,
        labels: list[Any] | None = None,
        epsilon: float | None = 1.0,
        delta: float = 1e-6,
        expected_records: int | None = None,
        rounds: int | Policy = POLICY,
        depth: int | Policy = POLICY,
        learning_rate: float | Policy = POLICY,
        sampling_rate: float | Policy = POLICY,
        count_share: float | Policy = POLICY,
        init_share: float | Policy = POLICY,
        grad_clip: float | Policy = POLICY,
        hess_clip: float | None | Policy = POLICY,
        reg_lambda: float | Policy = POLICY,
        reg_lambda_noise_stds: float | Policy = POLICY,
        leaf_clip: float | None | Policy = POLICY,
        feature_selection: str | Policy = POLICY,
        mains_cycles: int | None | Policy = POLICY,
        split_candidates: int | None | Policy = POLICY,
        smoothing: float | Policy = POLICY,
        grid_share: float | Policy = POLICY,
        logistic_gradient: str | Policy = POLICY,
        individual_filter: bool = True,
        train_every: int | Policy = POLICY,
        trees_per_trigger: int | Policy = POLICY,
        warmup: int | Policy = POLICY,
        trigger_growth: float | Policy = POLICY,
        max_train_every: int | None | Policy = POLICY,
        max_train_every_beyond_end: int | None | Policy = POLICY,
        final_trees: int | Policy = POLICY,
        noise_stages: tuple[tuple[int, int], ...] | Policy = POLICY,
        recalibration: RecalibrationPolicy | dict[str, Any] | None | Policy = POLICY,
        max_trees: int | None = None,
        store: StateStore | str | None = None,
        seed: int | None = None,
        strict: bool = False,
    ) -> None:
        self.features = features
        self.target_bounds = target_bounds
        self.labels = labels
        self.epsilon = epsilon
        self.delta = delta
        self.expected_records = expected_records
        self.rounds = rounds
        self.depth = depth
        self.learning_rate = learning_rate
        self.sampling_rate = sampling_rate
        self.count_share = count_share
        self.init_share = init_share
        self.grad_clip = grad_clip
        self.hess_clip = hess_clip
        self.reg_lambda = reg_lambda
        self.reg_lambda_noise_stds = reg_lambda_noise_stds
        self.leaf_clip = leaf_clip
        self.feature_selection = feature_selection
        self.mains_cycles = mains_cycles
        self.split_candidates = split_candidates
        self.smoothing = smoothing
        self.grid_share = grid_share
        self.logistic_gradient = logistic_gradient
        self.individual_filter = individual_filter
        self.train_every = train_every
        self.trees_per_trigger = trees_per_trigger
        self.warmup = warmup
        self.trigger_growth = trigger_growth
        self.max_train_every = max_train_every
        self.max_train_every_beyond_end = max_train_every_beyond_end
        self.final_trees = final_trees
        self.noise_stages = noise_stages
        self.recalibration = recalibration
        self.max_trees = max_trees
        self.store = store
        self.seed = seed
        self.strict = strict
        if self._task == "classification" and target_bounds is not None:
            raise ValueError("target_bounds is for regression; a classifier takes a public "
                             "label set, labels=[...]")
        if self._task == "regression" and labels is not None:
            raise ValueError("labels is a classifier's public label set; a regressor takes "
                             "target_bounds")
        if not isinstance(features, Mapping) or not features:
            raise ValueError("features must be a non-empty mapping of name to (lo, hi) for a "
                             "numeric feature or to the list of its values for a categorical "
                             f"one, got {type(features).__name__} {features!r:.80}")
        given = {name: getattr(self, name) for name in _POLICY_ARGUMENTS}
        with plain_argument_errors(type(self).__name__):
            schema = PublicSchema(
                features=dict(features),
                target_bounds=target_bounds if self._task == "regression" else None,
                labels=labels,
            )
            config = EngineConfig.from_defaults(
                schema, self._task, epsilon, delta, expected_records,
                individual_filter=individual_filter, max_trees=max_trees,
                **{name: value for name, value in given.items() if not isinstance(value, Policy)})
        self._engine = StreamEngine(config, store=store, seed=seed, strict=strict)
        self._drawn_from: PrivacyAccountant | None = None
        #: The code that last called a learning method (its ``id``, and that of the River
        #: wrapper running it), whose wrappers were judged then (:meth:`_check_wrapper`).
        self._checked_caller: Any = None

    # ------------------------------------------------------------------ River plumbing
    @property
    def _is_stochastic(self) -> bool:
        return True

    @property
    def engine(self) -> StreamEngine:
        """The engine behind the estimator (pool, ledger, model, store)."""
        return self._engine

    def _encode_one(self, x: Mapping[str, Any]) -> np.ndarray:
        return self._engine.validator.features(x)[None, :]

    @staticmethod
    def _columns(X: Any) -> tuple[dict[str, Any], int]:
        """The columns of a DataFrame or of a mapping name → values (an array has no names
        to match the schema's, so it is refused here rather than deep in numpy)."""
        if not (hasattr(X, "columns") or isinstance(X, Mapping)):
            raise TypeError(f"X must be a pandas DataFrame or a mapping of feature name to "
                            f"column, got {type(X).__name__} (an array has no feature names; "
                            "pandas.DataFrame(X, columns=names) gives it the schema's)")
        if hasattr(X, "columns") and not X.columns.is_unique:
            doubled = X.columns[X.columns.duplicated()][0]
            raise ValueError(f"X names the column {doubled!r:.80} twice: each feature is "
                             "one column")
        given = {c: X[c].to_numpy() if hasattr(X[c], "to_numpy") else X[c] for c in X}
        columns = {c: vector(values) for c, values in given.items()}
        if (one := next((c for c, v in columns.items() if v.ndim != 1), None)) is not None:
            raise TypeError(f"X must hold one column of values a feature; {one!r:.80} holds "
                            f"{type(given[one]).__name__} {given[one]!r:.40} (one record "
                            "as a dict goes to learn_one / predict_one)")
        n = len(next(iter(columns.values()))) if columns else len(X)
        return columns, n

    def _encode_many(self, X: Any) -> np.ndarray:
        """Encoded rows for prediction (a column the schema lacks is an error here too; a
        feature without a column is warned about: a River row may lack a feature, but a
        frame without its column, usually a misspelt name, made every row's value missing
        without a word)."""
        columns, n = self._columns(X)
        given = set(map(str, columns))  # River's integer names read as the schema's text
        absent = [name for name in self._engine.schema.names if name not in given]
        if absent and n and not self._engine.validator.strict:  # strict: columns() refuses
            warnings.warn(f"X has no column for features {absent} of the public schema: every "
                          "row is answered as if their values were missing; check that the "
                          "column names match the schema's", SchemaMismatchWarning,
                          stacklevel=outside_stacklevel())
        rows, bad = self._engine.validator.columns(columns, n)
        if bad:
            first = min(bad)
            raise InvalidRecord(bad[first].reason, f"row {first}: {bad[first].detail}")
        return rows

    # ------------------------------------------------------------------ shared budget
    def draw_from(self, accountant: PrivacyAccountant, name: str | None = None) -> Any:
        """Charge this stream's lifetime per-key (ε, δ) to ``accountant``, a budget shared
        by the models trained on the same records; refused (``BudgetExceeded``) if it would
        overspend, a second time for the same estimator, and once it has read a record (a
        shared budget is checked before the records are read, not after)."""
        if self._drawn_from is not None:
            raise BudgetExceeded("this estimator already drew its budget; a stream's (ε, δ) "
                                 "covers its whole life")
        if self._engine.positions:
            raise ValueError(
                "draw_from must come before the first learn_one: this estimator has already "
                "read records, which the shared budget never checked. Draw a new estimator "
                "before it learns.")
        self._charge(accountant, name)
        return self

    def _charge(self, accountant: PrivacyAccountant, name: str | None) -> None:
        guarantee = self.privacy_guarantee()
        accountant.charge(name or f"{type(self).__name__} {len(accountant.charges) + 1}",
                          guarantee.epsilon, guarantee.delta)
        self._drawn_from = accountant

    def __setstate__(self, state: dict[str, Any]) -> None:
        """A copy (``copy.deepcopy``) of an estimator that drew from a shared budget and may
        still learn is a second model on the same records: it draws for itself, from the
        same accountant (shared by the copy), or the copy is refused with
        ``BudgetExceeded``. Before, it learned on the original's one charge."""
        self.__dict__.update(state)
        self._checked_caller = None  # an id of this process's code: judge the callers again
        if self._drawn_from is not None and self._engine.may_learn:
            self._charge(self._drawn_from, None)

    def clone(self, new_params: dict[str, Any] | None = None,
              include_attributes: bool = False) -> Any:
        """River's clone (a fresh estimator with the same parameters). The clone of an
        estimator that drew from a shared budget is a second model on the same records: it
        draws for itself, from the same accountant, or is refused (``BudgetExceeded``), as
        a copy is. River's clone goes through ``__init__``, so it learned on an uncharged
        budget. Without a shared budget, the clone of an estimator that has learned warns
        (``PrivacyLeakWarning``): it is a new ledger, and if it learns the same records
        the two models together spend the sum of their ε, which neither guarantee says (a
        batch model's second fit warns alike)."""
        new = super().clone(new_params, include_attributes)  # type: ignore[misc]
        if self._drawn_from is not None and new._engine.may_learn:
            new._charge(self._drawn_from, None)
        elif self._engine.positions and new._engine.may_learn and self.epsilon is not None:
            warnings.warn(
                f"clone() of a {type(self).__name__} that has learned "
                f"{self._engine.positions} records: the clone keeps a ledger of its own, so "
                "if it learns the same records, the two models together spend the sum of "
                "their ε and δ. Draw both from one budget (model.draw_from(PrivacyAccountant"
                "(...))) to have them counted and capped.", PrivacyLeakWarning,
                stacklevel=outside_stacklevel())
        return new

    def _check_wrapper(self) -> None:
        """Warn when a River wrapper drives this estimator in a way its ε does not cover
        (:func:`_composition_risk`): a model-selection wrapper or an ensemble (every
        candidate or member learns from the same records, so together they spend the sum of
        their ε; a bagging member also sees a record several times under fresh ids), a
        pipeline whose earlier step learns from the data (a scaler's running mean moves
        every later record's features, which the per-record accounting does not cover), or
        any other River wrapper that decides what the model learns (samplers, target
        scalers). Judged whenever the code calling ``learn_one`` / ``learn_many`` changes
        (a model that learned alone and was then put in a pipeline went unjudged), so a
        loop pays one frame lookup a record."""
        try:
            frame: FrameType | None = sys._getframe(2)
        except ValueError:  # called with no caller to look at (a thread's entry point)
            return
        if frame is None:
            return
        caller: Any = id(frame.f_code)
        if "river" in frame.f_code.co_filename:  # one River method serves many wrappers
            caller = (caller, id(frame.f_locals.get("self")))  # (Pipeline.learn_one): each
        if caller == self._checked_caller:
            return
        self._checked_caller = caller
        if self._engine.booster.calibration is None:
            return
        for _ in range(8):  # the wrapper calls learn_one from its own learn_one
            if frame is None:
                return
            risk = _composition_risk(frame.f_locals.get("self"), self)
            if risk is not None:
                warnings.warn(f"a private {type(self).__name__} {risk}", PrivacyLeakWarning,
                              stacklevel=outside_stacklevel())
                return
            frame = frame.f_back

    # ------------------------------------------------------------------ learning
    def learn_one(self, x: dict, y: Any, *, key: Any = None) -> None:
        """Buffer a copy of ``x`` under ``key`` (a new sequence id if None); may run rounds.

        Raises :class:`~renyiboost.exceptions.InvalidRecord` (a ``ValueError``) for a
        feature the schema does not know, a non-finite or non-numeric value of a numeric
        feature, a label outside the public domain or a bad key; the record is then not
        learned, but its call still counts as one stream position (the public schedule must
        not depend on whether a record was valid).

        ``key`` is the only keyword: a sample weight (River's ``w``) would change a record's
        sensitivity, which the accounting fixes, and a misspelt key (``user_id=``) once fell
        silently into ``**kwargs``, leaving the record keyless. River's ``Pipeline`` reads
        the signature and forwards ``key`` alone.
        """
        self._check_wrapper()
        engine, outside = self._engine, []
        with engine.validator.warnings_at_end():  # after the record's position is counted
            try:  # the label and the key first: features() warns, once, about a record
                label = engine.validator.label(y)  # learned without a value, which a record
                name = None if key is None else normalise_key(key)  # refused for them is not
                row = engine.validator.features(x, outside)
            except InvalidRecord:
                engine.empty_event()
                raise
            if outside:
                engine.validator.note_outside(outside)
            engine.add_one(row, label, name)

    def learn_many(self, X: Any, y: Any, keys: list[Any] | None = None) -> None:
        """``learn_one`` over the rows of a DataFrame (or a column mapping), in order.

        Each row is judged on its own: the valid rows are learned, every row counts as one
        stream position, and if some rows were invalid an ``InvalidRecord`` naming the first
        of them is raised after the valid ones were learned.
        """
        self._check_wrapper()
        engine = self._engine
        require_aligned(X, y, keys)
        columns, n = self._columns(X)
        targets = vector(y.to_numpy() if hasattr(y, "to_numpy") else y)
        if targets.shape != (n,):
            raise ValueError(f"y has shape {targets.shape}, expected ({n},)")
        other: dict[int, InvalidRecord] = dict(engine.validator.bad_labels(targets))
        names: list[str | None] | None = None
        if keys is not None:
            if len(keys) != n:
                raise ValueError(f"got {len(keys)} keys for {n} rows")
            names = []
            for i, key in enumerate(keys):
                try:
                    if key is None:  # a key column with gaps: refused per row, with the way
                        raise InvalidRecord("key", "row without a key (None) in keys=: give "
                                            "every row its key, or learn the rows without one "
                                            "apart (keys=None, or learn_one's key=None)")
                    names.append(normalise_key(key))
                except InvalidRecord as why:
                    other.setdefault(i, why)
                    names.append(None)
        with engine.validator.warnings_at_end():  # after the rows' positions are counted
            rows, bad = engine.validator.columns(columns, n, exclude=other, count=True)
            bad = {**other, **bad}
            good = np.ones(n, dtype=bool)
            good[list(bad)] = False
            index = np.flatnonzero(good)
            engine.add(rows[index], targets[index],
                       None if names is None else [names[i] for i in index.tolist()],
                       event_index=index, n_events=n)
        if bad:
            raise rows_not_learned(bad, n)

    def train(self, rounds: int = 1) -> int:
        """Signal a batch boundary: merge buffered records and run ``rounds`` rounds now."""
        return self._engine.train(rounds)

    def finish(self, split_grid: bool | None = None) -> int:
        """The stream has ended: release a split grid and run an end burst here (a share
        of the nominal rounds: :meth:`renyiboost.stream.engine.StreamEngine.finish`, which
        says when ``split_grid`` buys a grid). Call it after the last ``learn_one`` of a
        finite stream, before you predict; a stream without ``expected_records`` otherwise
        ends with most of its late records' budget unspent. Returns the trees added."""
        return self._engine.finish(split_grid)

    def close(self) -> None:
        """Commit the records learned since the last round (merged into the pool, nothing
        released) with their positions, then release the store and its lock. A restart on
        the same store resumes here with those records; closing the engine alone leaves
        them to a source that re-reads them, which a River stream does not have. A second
        call does nothing."""
        engine = self._engine
        if not engine.closed:
            try:
                if engine.may_learn:  # a forked child or a copy has nothing of its own
                    engine.flush()  # to commit
            finally:  # a listener's error raised by the flush left the store locked
                engine.close()  # (review D4)

    # ------------------------------------------------------------------ public release
    def privacy_guarantee(self) -> PrivacyGuarantee:
        """ε, δ, the order α̂, σ and the per-key budget B (public)."""
        return self._engine.privacy_guarantee()

    def release(self, model: str = "model") -> ModelRelease:
        """The committed model as a public release (an export: trees, schema, guarantee)."""
        return self._engine.release(model)

    # ------------------------------------------------------------------ operator telemetry
    def operator_telemetry(self) -> OperatorTelemetry:
        """Exact pool counts, spent quantiles, offsets. Operator telemetry: not public."""
        return self._engine.operator_telemetry()

    def operator_budget_of(self, key: Any) -> KeyBudget:
        """Spent RDP and status of one key. Operator telemetry (a membership oracle)."""
        return self._engine.operator_budget_of(key)

    def _margins(self, X: Any) -> np.ndarray:
        return self._engine.predict_margin(self._encode_many(X))

    def _series(self, values: np.ndarray, X: Any) -> Any:
        import pandas as pd

        return pd.Series(values, index=getattr(X, "index", None))


class SGBDTRegressor(_SGBDTEstimator, base.MiniBatchRegressor):
    """Differentially private boosted random trees with an individual Rényi filter (River).

    Each key has one lifetime Rényi-DP budget; rounds charge every eligible record for its
    own clipped gradient, and exhausted keys retire (S-GBDT, Kirschte et al., Alg. 8).

    Parameters
    ----------
    features
        Public schema: name → ``(lo, hi)`` or a list of category values. Never read it from
        the data.
    target_bounds
        Public ``(lo, hi)`` of the target; labels outside raise ``ValueError``. Take them
        as narrow as public knowledge allows: gradients are clipped at 0.3 of the
        half-range, so the leaves' noise grows with the range while the labels' signal
        does not (Friedman at ε = 0.5 with the size hint: R² 0.80 inside [−1, 31], 0.75
        inside [−5, 35], 0.57 inside [−15, 45]; README, "What the defaults miss").
    epsilon, delta
        The (ε, δ) guarantee per key; ``epsilon=None`` trains without privacy.
    expected_records
        A *public* estimate of how many records the stream will bring (``None``: 10,000,
        :data:`~renyiboost.models.defaults.PRIOR_RECORDS`). Every parameter below that is
        left out takes the default policy's value for it and ε
        (:mod:`renyiboost.models.defaults`).
    rounds
        Nominal rounds T a full-sensitivity record can afford (small gradients buy more).
    depth, learning_rate, sampling_rate, count_share, init_share, grad_clip, hess_clip,
    reg_lambda, leaf_clip, feature_selection, split_candidates, individual_filter
        The learner's hyper-parameters (see :class:`renyiboost.models.booster.SGBDTParams`);
        left out (``POLICY``), each takes the default policy's value; ``None`` is passed on
        (``hess_clip=None``: count leaves, ``leaf_clip=None``: no leaf clipping).
    reg_lambda_noise_stds
        λ is raised to this many standard deviations of a leaf's denominator noise, so it
        grows as ε shrinks (the policy: 0.8 for a classifier, 0 for a regressor; 0 keeps
        ``reg_lambda`` exactly). Post-processing of the noisy sums: the charges and the
        guarantee do not change.
    mains_cycles
        With ``feature_selection="mains_then_pairs"``, at most this many one-feature trees
        for each feature before the pair trees (a classifier's policy: 20; ``None``: half
        the nominal rounds, however few the features), so that a stream shorter than it
        expected, or a schema of a few features, reaches the pairs.
    smoothing
        Answers average the trees over shifted copies of the row, each numeric feature moved
        across a window this share of its public range wide (the policy: 1/32; 0: none).
        Post-processing of the released trees: training and the guarantee do not change.
    grid_share
        With ``expected_records``, the share of the budget that buys a private split grid
        at the hinted end, before the end burst: noisy histograms of the numeric features
        from the records that can still afford it, at whose quantiles the later trees split
        (the policy: 0.05 with a hint over numeric features; 0: none). Without a hint it
        must stay 0, and ``finish()`` buys the grid from the budget the records left unspent
        (``finish(split_grid=False)``: none).
    logistic_gradient
        A classifier's gradients within ``grad_clip``: ``"clipped"`` (S-GBDT; probabilities
        pulled towards the majority class) or ``"proper"`` (weighted by the prediction, so
        leaves settle at the true rate; :class:`~renyiboost.models.losses.LogisticLoss`).
        The policy: ``"proper"`` from 30,000 records × ε on (``expected_records``, or the
        10,000 a stream without a hint assumes).
    train_every, trees_per_trigger, warmup, trigger_growth, max_train_every,
    max_train_every_beyond_end, final_trees, max_trees
        Triggers and model size (see :class:`renyiboost.stream.engine.EngineConfig`;
        ``final_trees``: extra rounds at ``expected_records``, by default ``rounds // 2`` with a
        hint; 0 switches the end burst off). Left out, each takes the policy's
        :func:`~renyiboost.models.defaults.stream_schedule` and
        :func:`~renyiboost.models.defaults.trees_per_trigger` (1 when you set any schedule
        field yourself); an explicit ``train_every`` without ``trigger_growth`` is a fixed
        interval. ``max_train_every_beyond_end``: beyond a hinted end, one tree a trigger
        and intervals growing up to this (the policy: an unhinted stream's,
        :func:`~renyiboost.models.defaults.beyond_end_every`); ``None`` keeps the hint's
        schedule, e.g. to resume a store written before it existed.
    noise_stages
        ``((until, rounds), ...)``: the rounds up to stream position ``until`` have the noise
        of ``rounds`` nominal rounds (:func:`~renyiboost.models.defaults.noise_stages`, the
        default: the stages that end before the expected size); ``()`` switches them off,
        e.g. to resume a store written before stages existed.
    recalibration
        A binary classifier's answers are ``σ(a·m + b)`` of the trees' margin ``m``, with
        Platt's ``(a, b)`` refitted every ``every`` positions on the keys that arrived
        since, each paying ``share`` of its budget on arrival (the policy, private binary
        streams: every 20,000, share 0.05; the first window opens after one, so a shorter
        stream pays nothing; :mod:`~renyiboost.models.recalibration`). It fixes the tilt of
        an unbounded imbalanced stream's answers towards the majority class; ``None``
        switches it off, e.g. to resume a store written before it existed.
    store
        ``None`` keeps state in memory. ``SQLiteStore(path, create=True)`` makes it durable
        in a new file; afterwards ``store=path`` (or a ``sqlite:///`` URL) resumes from it
        with the same arguments. ``PostgresStore(url, create=True)`` and then
        ``store="postgresql://…"`` do the same on a PostgreSQL server. A path is never created implicitly: a lost state file
        would otherwise hand every key a fresh budget.
    seed
        ``None`` (default): CSPRNG noise. An integer makes runs reproducible and the model
        is then for testing only (``TestingOnlyWarning``).
    strict
        ``False`` (default): a feature of the schema that has not arrived by the initial
        score raises a ``SchemaMismatchWarning``. ``True``: every record must name every
        schema feature (``None`` marks a missing value), else ``InvalidRecord`` — per
        record, so the public schedule is unchanged. Values outside the public bounds warn
        once per feature either way (counts in ``operator_telemetry().outside_domain``), and
        so does a feature that had values and then none for long (``None`` values too:
        ``operator_telemetry().features_stopped``).

    Examples
    --------
    >>> from river import datasets, evaluate, metrics
    >>> from renyiboost import SGBDTRegressor
    >>> model = SGBDTRegressor(
    ...     features={"ordinal_date": (736389, 737389), "gallup": (30, 55), "ipsos": (30, 55),
    ...               "morning_consult": (30, 55), "rasmussen": (30, 55), "you_gov": (30, 55)},
    ...     target_bounds=(30, 55), epsilon=1.0, expected_records=1001)   # the defaults
    >>> metric = evaluate.progressive_val_score(datasets.TrumpApproval(), model, metrics.MAE())
    >>> model.privacy_guarantee().epsilon <= 1.0
    True
    """

    _task = "regression"

    def _unscale(self, margin: np.ndarray) -> np.ndarray:
        return self._engine.booster.loss.unscale(margin)

    def predict_one(self, x: dict, **kwargs: Any) -> float:
        return float(self._unscale(self._engine.predict_margin(self._encode_one(x)))[0])

    def predict_many(self, X: Any) -> Any:
        return self._series(self._unscale(self._margins(X)), X)

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        yield {
            "features": {"ordinal_date": (736389, 737389), "gallup": (30, 55), "ipsos": (30, 55),
                         "morning_consult": (30, 55), "rasmussen": (30, 55),
                         "you_gov": (30, 55)},
            "target_bounds": (30.0, 55.0),
            "epsilon": 1.0, "rounds": 5, "depth": 2, "sampling_rate": 0.5,
            "train_every": 20, "warmup": 20, "learning_rate": 0.5,
        }


class SGBDTClassifier(_SGBDTEstimator, base.MiniBatchClassifier):
    """Classifier version of :class:`SGBDTRegressor`: binary (logistic loss) or multiclass
    (softmax loss with vector leaves).

    ``labels`` is the *public* label set, in a fixed order (JSON scalars: strings, integers,
    booleans). Without it labels are booleans (or 0/1) and ``predict_proba_one`` returns
    ``{False: p0, True: p1}``. Two labels make a binary model whose positive class is the
    second; three or more a multiclass one, where each round's random tree releases one
    noisy clipped-gradient sum per class and one noisy count per leaf, and each record is
    charged from the L2 norm of its clipped gradient vector (see
    :class:`~renyiboost.models.losses.SoftmaxLoss`). A label outside the set is refused
    (``InvalidRecord``); ``predict_proba_one`` always returns every label, also before any
    learning (then uniform). ``hess_clip`` (Newton leaves) is for binary models. The other
    parameters are those of :class:`SGBDTRegressor` (``target_bounds`` must stay None).

    Examples
    --------
    >>> from river import datasets, evaluate, metrics
    >>> from renyiboost import SGBDTClassifier
    >>> phishing = datasets.Phishing()
    >>> features = {name: (0, 1) for name in next(iter(phishing))[0]}
    >>> model = SGBDTClassifier(features, epsilon=1.0, expected_records=1250)   # the defaults
    >>> metric = evaluate.progressive_val_score(phishing, model, metrics.Accuracy())
    >>> model.predict_proba_one({"https": 1.0}).keys() == {False, True}
    True

    A multiclass stream (river's ``ImageSegments``, public bounds in
    :data:`renyiboost.datasets.IMAGE_SEGMENTS_SCHEMA`):

    >>> from renyiboost.datasets import IMAGE_SEGMENTS_SCHEMA as segments
    >>> model = SGBDTClassifier(segments.features, labels=segments.labels, epsilon=1.0,
    ...                         expected_records=2310)
    >>> metric = evaluate.progressive_val_score(datasets.ImageSegments(), model,
    ...                                         metrics.Accuracy())
    >>> sorted(model.predict_proba_one({"hue-mean": 0.5}))[:3]
    ['brickface', 'cement', 'foliage']
    """

    _task = "classification"

    @property
    def _multiclass(self) -> bool:
        return self._engine.schema.n_classes > 2

    @property
    def _classes(self) -> list[Any]:
        return self._engine.schema.classes

    def predict_proba_one(self, x: dict, **kwargs: Any) -> dict[Any, float]:
        p = class_probabilities(self._engine.predict_margin(self._encode_one(x)))[0]
        return dict(zip(self._classes, p.tolist(), strict=True))

    def predict_one(self, x: dict, **kwargs: Any) -> Any:
        return self._classes[int(class_codes(
            self._engine.predict_margin(self._encode_one(x)))[0])]

    def predict_proba_many(self, X: Any) -> Any:
        import pandas as pd

        return pd.DataFrame(class_probabilities(self._margins(X)), columns=self._classes,
                            index=getattr(X, "index", None))

    def predict_many(self, X: Any) -> Any:
        codes = class_codes(self._margins(X))
        return self._series(np.asarray(self._classes, dtype=object)[codes], X)

    @classmethod
    def _unit_test_params(cls) -> Iterator[dict[str, Any]]:
        phishing = {name: (0.0, 1.0) for name in (
            "empty_server_form_handler", "popup_window", "https", "request_from_other_domain",
            "anchor_from_other_domain", "is_popular", "long_url", "age_of_domain",
            "ip_in_url")}
        small = {"epsilon": 1.0, "rounds": 5, "depth": 2, "sampling_rate": 0.5,
                 "train_every": 20, "warmup": 20, "learning_rate": 0.5}
        yield {"features": phishing, **small}
        # Multiclass: River's checks feed Phishing (bool labels) and ImageSegments, so the
        # public schema and label set cover both.
        from renyiboost.datasets import IMAGE_SEGMENTS_SCHEMA

        yield {"features": phishing | IMAGE_SEGMENTS_SCHEMA.features,
               "labels": [False, True, *IMAGE_SEGMENTS_SCHEMA.labels], **small}


__all__ = ["SGBDTClassifier", "SGBDTRegressor"]
