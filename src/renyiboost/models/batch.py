"""Batch S-GBDT estimator over numpy arrays (fit once, predict many).

The streaming engine and the River estimators drive the same :class:`SGBDTBooster`; this
class is the plain array interface used by the reproduction experiments.
"""

from __future__ import annotations

import math
import warnings
from typing import Any

import numpy as np
from scipy.special import expit
from sklearn.utils.metaestimators import available_if

from renyiboost.accounting import SizeEstimate
from renyiboost.accounting.budget import PrivacyAccountant
from renyiboost.accounting.events import RdpAccountant
from renyiboost.exceptions import (
    PrivacyLeakWarning,
    SchemaMismatchWarning,
    outside_stacklevel,
    plain_argument_errors,
)
from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams, check_fits_schema
from renyiboost.models.defaults import (
    PRIOR_RECORDS,
    check_privacy_inputs,
    covering_selection,
    default_params,
    expected_records_hint,
    policy_fields,
    size_fields,
    warn_unread,
)
from renyiboost.models.explain import feature_contributions, feature_importances, initial_term
from renyiboost.models.losses import class_codes, class_probabilities, unscale_margin
from renyiboost.models.trees import Ensemble
from renyiboost.randomness import noise_source
from renyiboost.release import (
    RELEASE_FORMAT,
    ModelRelease,
    PrivacyGuarantee,
    released_trees,
)
from renyiboost.schema import PublicSchema
from renyiboost.validation import RecordValidator, require_aligned


def require_target_bounds(model: Any, task: str, schema: PublicSchema) -> None:
    """Refuse regression without the schema's public target bounds (reading them from the
    labels would leak them), and say how to ask for a classifier instead."""
    if task == "regression" and schema.target_bounds is None:
        raise ValueError(f"{type(model).__name__} regression needs the schema's public "
                         "target_bounds (reading them from the labels would leak them); "
                         "for 0/1 labels pass task='classification'")


def task_of_schema(schema: PublicSchema, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` with the task the public schema implies when they name none: a label set
    is a classifier's (a fit without ``task`` built a regressor and then asked for target
    bounds), target bounds a regressor's. A task that contradicts the schema is refused,
    since the other half of the schema would be ignored without a word; regression without
    target bounds is refused where the learner is built (:meth:`MarginModel._setup`)."""
    if not isinstance(schema, PublicSchema):  # a dict of features failed on .labels
        raise TypeError(f"schema must be a PublicSchema, e.g. PublicSchema(features={{...}}, "
                        f"labels=[...]) or (..., target_bounds=(lo, hi)); got "
                        f"{type(schema).__name__} {schema!r:.60}")
    task = params.get("task")
    if task is None:
        if schema.labels is not None:
            return {**params, "task": "classification"}
        return params if schema.target_bounds is None else {**params, "task": "regression"}
    if task == "regression" and schema.labels is not None:
        raise ValueError("task='regression', but the schema has a public label set "
                         "(labels=...), which only a classifier reads: pass "
                         "task='classification', or a schema with target_bounds")
    if task == "classification" and schema.target_bounds is not None:
        raise ValueError("task='classification', but the schema has target_bounds, which "
                         "only a regressor reads: pass task='regression', or a schema "
                         "without them (labels=[...] for a label set)")
    return params


def is_classifier(model: Any) -> bool:
    """Whether ``model`` is a classifier, which alone has ``predict_proba``."""
    return model.params.task == "classification"


class MarginModel:
    """What a batch learner over schema-encoded arrays shares: label checks and predictions
    from its fitted :class:`~renyiboost.models.trees.Ensemble` (``self.ensemble``) of margins
    (the target scaled to [−1, 1] by the public bounds, or log-odds)."""

    schema: PublicSchema
    params: Any  # has .task
    ensemble: Ensemble | None
    #: The shared budget every fit draws from (:meth:`draw_from`), or None.
    accountant: PrivacyAccountant | None = None
    accounting_name: str = ""
    #: How many fits of this model have drawn their budget (:meth:`_draw_budget`).
    _budget_draws: int = 0
    #: The record rules and outside-bounds counts (:meth:`_record_checks`), made on use.
    _checks: RecordValidator | None = None
    #: Whether the learner handles more than two classes. The binary learners of the field
    #: read a class code as a 0/1 label: DiPriMe's leaf counts took class 2 as two
    #: positives and a negative (L1 sensitivity 3 against the 1 its noise is scaled for).
    multiclass: bool = False

    # ------------------------------------------------------------------ shared budget
    def draw_from(self, accountant: PrivacyAccountant, name: str | None = None) -> Any:
        """Charge every later :meth:`fit` of this model to ``accountant`` (a budget shared
        by the models trained on the same data): each fit first charges its planned (ε, δ)
        and is refused (``BudgetExceeded``, before any record is read) if it would overspend.
        Returns the model.

        Only before the first fit (or again with the budget it already draws from): a model
        that has fitted joined a budget silently before, and the budget never counted that
        fit, so other models could spend the whole total on the same rows (review A), as
        the River estimators already refused after their first record."""
        if self._budget_draws and accountant is not self.accountant:
            where = ("which the shared budget never counted" if self.accountant is None
                     else "charged to another budget, which this one does not see")
            raise ValueError(
                f"draw_from must come before the first fit: this {type(self).__name__} has "
                f"fitted {self._budget_draws} time(s) already, {where}. Draw a new model "
                "before it fits.")
        self.accountant = accountant
        self.accounting_name = name or f"{type(self).__name__} {len(accountant.charges) + 1}"
        return self

    def planned_privacy(self) -> tuple[float | None, float]:
        """The (ε, δ) a fit will spend, from the parameters alone."""
        return self.params.epsilon, float(getattr(self.params, "delta", 0.0))

    def _draw_budget(self) -> None:
        """Charge the shared budget, if any, before the fit reads a record. Without one, a
        second fit of a private model warns: on rows that overlap the first fit's, the two
        releases together spend the sum of their ε and δ (sequential composition), which
        :meth:`privacy_guarantee` (this fit's alone) does not say."""
        if self.accountant is not None:
            self.accountant.charge(self.accounting_name, *self.planned_privacy())
        elif self._budget_draws and self.params.epsilon is not None:
            warnings.warn(
                f"{type(self).__name__}.fit was called again (fit {self._budget_draws + 1}): "
                "if its rows overlap those of an earlier fit, the models released from them "
                "together spend the sum of their ε and δ, while privacy_guarantee() states "
                "this fit's alone. Fit a new model per data set, or draw the fits from one "
                "budget (model.draw_from(PrivacyAccountant(...))) to have them counted and "
                "capped.", PrivacyLeakWarning, stacklevel=outside_stacklevel())
        self._budget_draws += 1

    def _setup(self, schema: PublicSchema, seed: int | None, params_type: Any,
               given: dict[str, Any]) -> None:
        """The schema, the noise seed and the parameters ``given``, validated by
        ``params_type`` with the task the schema implies (:func:`task_of_schema`);
        regression needs the schema's public target bounds."""
        params = params_type(**task_of_schema(schema, given))
        self.schema, self.seed, self.params = schema, seed, params
        require_target_bounds(self, params.task, schema)
        self.ensemble = None

    def _record_checks(self) -> RecordValidator:
        """The stream's rules for a record (:class:`~renyiboost.validation.RecordValidator`)
        over this model's schema and task; it also counts, per feature, the training values
        outside the public bounds (:attr:`operator_outside_`)."""
        checks = self._checks
        if checks is None or checks.schema is not self.schema or checks.task != self.params.task:
            checks = self._checks = RecordValidator(self.schema, self.params.task)
            checks.counts_at = f"{type(self).__name__}.operator_outside_"
        return checks

    @property
    def operator_outside_(self) -> dict[str, int]:
        """Per feature, the training values outside its public bounds or domain (clipped, or
        sent to "other") over every :meth:`fit` of this model. Operator telemetry (exact
        counts of the training rows): never part of an export."""
        return dict(zip(self.schema.names, self._record_checks().outside.tolist(),
                        strict=True))

    def _training_data(self, X: np.ndarray, y: np.ndarray
                       ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Clipped rows, checked labels, and the target: regression labels scaled to
        [−1, 1] by the public bounds (never by the data), classification labels as given.

        ``X`` and ``y`` are judged as a stream judges a record (:class:`~renyiboost.
        validation.RecordValidator`), except that NaN in ``X`` marks a missing value: ±inf
        in ``X``, a label :meth:`RecordValidator.label` refuses (a regression label that is
        not a number or lies outside the public ``target_bounds``, a class label outside the
        public label set) raise ``ValueError``. Values outside a feature's public bounds are
        clipped, as the stream clips them: counted (:attr:`operator_outside_`) and warned
        about once per feature (:class:`~renyiboost.exceptions.SchemaMismatchWarning`)."""
        X, y, outside = self.check_inputs(X, y)
        regression = self.params.task == "regression"
        self._record_checks().note_outside(outside)
        if len(X) and (empty := np.flatnonzero(np.isnan(X).all(axis=0))).size:
            # as a stream warns of a feature that never arrived (a misnamed column made by
            # encode_columns, all missing, was learned without a word: review R)
            names = [self.schema.names[j] for j in empty[:8]]
            warnings.warn(f"features {names} of the public schema have no value in any "
                          "training row: every tree takes them as missing; check that the "
                          "columns' names match the schema's", SchemaMismatchWarning,
                          stacklevel=outside_stacklevel())
        self._draw_budget()  # before any record is read by a mechanism
        if not regression:
            return X, y, y
        lo, hi = self.schema.target_bounds
        return X, y, 2.0 * (np.clip(y, lo, hi) - lo) / (hi - lo) - 1.0

    def check_inputs(self, X: np.ndarray, y: np.ndarray
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """The checks of a fit (:meth:`_training_data`), which read nothing into a
        mechanism: ``ValueError`` where a fit would raise it; else the clipped rows, the
        checked labels and the count of clipped values of each feature (operator
        telemetry, nothing noted or warned about here)."""
        if (self.params.task == "classification" and self.schema.n_classes > 2
                and not self.multiclass):
            raise ValueError(
                f"{type(self).__name__} is a binary classifier, but the schema's public label "
                f"set has {self.schema.n_classes} classes: it would read the class codes as "
                "0/1 labels, and its noise is scaled for those. Use SGBDT (multiclass) or two "
                "classes")
        outside = np.zeros(self.schema.n_features, dtype=np.int64)
        require_aligned(X, y)
        X = self.schema.clip_encoded(X, outside)
        y = self._validate_target(y)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        require_target_bounds(self, self.params.task, self.schema)
        return X, y, outside

    def _gradient(self, margin: np.ndarray, target: np.ndarray) -> np.ndarray:
        """The loss gradient at ``margin``: ``F − y`` (squared loss on the scaled target) or
        ``σ(F) − y`` (log-loss)."""
        if self.params.task == "classification":
            return expit(margin) - target
        return margin - target

    def _validate_target(self, y: np.ndarray) -> np.ndarray:
        """Regression labels as floats; class labels as their index in the schema's public
        label set (0/1 without one)."""
        if self.params.task == "classification" and self.schema.labels is not None:
            raw = np.asarray(y, dtype=object)
            if raw.ndim != 1:
                raise ValueError("y must be a 1-D array of labels")
            codes = self.schema.label_codes(raw)
            if (codes < 0).any():
                raise ValueError(f"label {raw[codes < 0][0]!r} is not in the schema's public "
                                 f"labels {self.schema.labels}")
            return codes.astype(float)
        raw = np.asarray(y)
        if raw.ndim != 1:
            raise ValueError(f"y must be a 1-D array of labels, got shape {raw.shape}")
        bad = self._record_checks().bad_labels(raw)
        if bad:
            first, why = bad[0]
            raise ValueError(f"y holds {len(bad)} labels a stream would refuse; y[{first}]: "
                             f"{why.detail}")
        return raw.astype(float)

    def _ensemble(self) -> Ensemble:
        if self.ensemble is None:
            raise RuntimeError(f"this {type(self).__name__} is not fitted yet; call fit(X, y) "
                               "first")
        return self.ensemble

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The raw margin (scaled target for regression, log-odds for classification; one
        column a class for multiclass)."""
        return self._ensemble().predict_margin(self.schema.clip_encoded(X, one_row=True))

    def predict(self, X: np.ndarray) -> np.ndarray:
        """Regression: values on the target's scale. Classification: class indices 0/1
        without a public label set, else the labels themselves."""
        margin = self.decision_function(X)
        if self.params.task == "regression":
            return unscale_margin(margin, self.schema.target_bounds)  # type: ignore[arg-type]
        codes = class_codes(margin)
        if self.schema.labels is None:
            return codes
        return np.asarray(self.schema.classes, dtype=object)[codes]

    @available_if(is_classifier)
    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        """Class probabilities, one column a class in the order of the public labels (a
        regressor has no such method: ``hasattr`` says so, as scikit-learn's do)."""
        return class_probabilities(self.decision_function(X))

    # ------------------------------------------------------------------ explanations
    def _intercept(self) -> float | list[float]:
        """The margin no feature owns (with a recalibration's ``answer_map``, ``a · init_score
        + b``: :func:`~renyiboost.models.explain.initial_term`)."""
        return initial_term(self._ensemble())

    def contributions(self, X: np.ndarray) -> np.ndarray:
        """Per row and feature, the feature's exact share of the margin: for models whose
        trees each test one feature (:func:`~renyiboost.models.explain.
        feature_contributions`; ``ValueError`` otherwise)."""
        return feature_contributions(self._ensemble(),
                                     self.schema.clip_encoded(X, one_row=True),
                                     self.schema.n_features)

    def explain_one(self, x: np.ndarray) -> dict[str, Any]:
        """One encoded row's margin split exactly into ``intercept`` and a term a feature
        (free post-processing of the release).

        ``x`` is checked as :meth:`predict` checks a row: a pandas Series or a one-row frame
        is matched to the features by name (it was read in its own order, so a Series in
        another order got the other features' terms), a string is refused."""
        parts = self.contributions(x)
        if len(parts) != 1:
            raise ValueError(f"explain_one explains one row, got {len(parts)}; use "
                             "contributions for many")
        parts = parts[0]
        return {"intercept": self._intercept(),  # a list a class for a multiclass model
                **{name: v.tolist() for name, v in zip(self.schema.names, parts, strict=True)}}

    def feature_importances(self) -> dict[str, float]:
        """Each feature's share of the trees' effect (see
        :func:`~renyiboost.models.explain.feature_importances`)."""
        shares = feature_importances(self._ensemble(), self.schema.n_features)
        return dict(zip(self.schema.names, shares.tolist(), strict=True))


class PureDPModel(MarginModel):
    """A learner whose whole fit is pure ε-DP with a budget object (``self.budget``: its
    ``spent_epsilon()`` and its composed ``event()``): DPBoost, DiPriMe."""

    budget: Any

    def privacy_guarantee(self) -> PrivacyGuarantee:
        """Pure ε-DP per row (δ = 0): a function of the parameters only."""
        return PrivacyGuarantee(private=True, unit="row", epsilon=self.budget.spent_epsilon(),
                                delta=0.0, order=None, sigma=None, budget_rdp=None,
                                seeded_for_testing=self.seed is not None)

    def planned_privacy(self) -> tuple[float | None, float]:
        return self.budget.spent_epsilon(), 0.0

    def rdp(self, orders: Any) -> np.ndarray:
        """The RDP curve of the whole fit (to compose it with Gaussian mechanisms)."""
        return RdpAccountant(orders).compose(self.budget.event()).rdp


class SGBDT(MarginModel):
    """Differentially private gradient-boosted random trees (S-GBDT) for arrays.

    Parameters
    ----------
    schema
        Public feature bounds/domains (and ``target_bounds`` for regression). ``X`` passed to
        :meth:`fit` and :meth:`predict` is encoded as by :meth:`PublicSchema.encode_columns`.
    seed
        ``None`` for CSPRNG noise (production); an integer for reproducible tests only.
    expected_records
        A *public* number of training rows for the default policy. Without it a private
        fit that leaves any policy parameter out buys a Laplace count of the rows with 5 %
        of ε (the guarantee's ``size_estimate_epsilon``).
    **params
        Any field of :class:`SGBDTParams` (``task``, ``epsilon``, ``delta``, ``rounds`` …);
        those left out come from :func:`renyiboost.models.defaults.default_params`.

    Notes
    -----
    The fitted object is the operator's, not a release: a pickle or copy of it carries the
    operator telemetry (:attr:`operator_history_`, :attr:`operator_outside_`: exact counts
    of the training rows). What leaves for the world is :meth:`to_json` / :meth:`release`.

    Examples
    --------
    >>> import numpy as np
    >>> from renyiboost.schema import PublicSchema
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 1, size=(2000, 2)); y = 3 * X[:, 0] + rng.normal(0, 0.1, 2000)
    >>> schema = PublicSchema(features={"a": (0, 1), "b": (0, 1)}, target_bounds=(-1, 4))
    >>> model = SGBDT(schema, epsilon=1.0, expected_records=2000).fit(X, y)  # the policy's
    >>> model.params.depth, model.params.rounds, model.privacy_guarantee().epsilon <= 1.0
    (4, 89, True)
    >>> model.predict(np.array([[0.1, 0.5], [0.9, 0.5]]))  # doctest: +SKIP
    array([0.25, 2.7 ])
    """

    multiclass = True  # softmax leaves, one vector a leaf

    def __init__(self, schema: PublicSchema, seed: int | None = None,
                 expected_records: int | None = None, **params: Any) -> None:
        self.schema = schema
        self.seed = seed
        self.expected_records = expected_records
        if expected_records is not None:
            expected_records_hint(expected_records)
        #: The caller's explicit parameters; the default policy fills in the others.
        self.explicit_params: dict[str, Any] = task_of_schema(schema, params)
        with plain_argument_errors(type(self).__name__):  # what was given, validated now
            self._given = SGBDTParams(**self.explicit_params)
        require_target_bounds(self, self._given.task, schema)
        #: The parameters the fit uses (known at construction when the size is public).
        self.params: SGBDTParams = self._resolve(expected_records)
        #: The size estimate's ε when :meth:`fit` bought one (public; part of the guarantee).
        self.size_estimate_epsilon: float | None = None
        #: The released noisy count of the training rows, when one was bought (public).
        self.size_estimate_: float | None = None
        self.booster: SGBDTBooster | None = None
        self.ensemble: Ensemble | None = None
        #: The smoothing spans of a private split grid (public; ``None``: public ranges).
        self.smoothing_spans_: list[float] | None = None
        #: The guarantee the model is released under when its own fit does not give it:
        #: the one a model read by :meth:`from_json` was released with (it has no booster
        #: to derive one from), or the total of the private selection that chose this fit
        #: (:func:`~renyiboost.models.tuning.private_tune`: it paid for the choice as well
        #: as for this run). ``None`` for a model fitted here; a new fit clears it.
        self.stated_guarantee: PrivacyGuarantee | None = None
        #: The release :meth:`from_json` read, exported as it was until a new fit (a stream's
        #: release was renumbered as a batch fit's, its version, rounds, store and name lost:
        #: review P #2).
        self.loaded_release: ModelRelease | None = None
        #: Per round: records admitted, sampled and retired. Operator telemetry (exact
        #: counts of the training rows): never part of an export.
        self.operator_history_: list[dict[str, int]] = []

    def planned_privacy(self) -> tuple[float | None, float]:
        return self._given.epsilon, self._given.delta

    def _needs_policy(self) -> bool:
        """Whether the caller left out a parameter the default policy decides."""
        return bool(policy_fields(self._given.task) - self.explicit_params.keys())

    def _needs_size(self) -> bool:
        """Whether the policy needs the number of rows: it decides a parameter that depends
        on it (:func:`~renyiboost.models.defaults.size_fields`)."""
        return self._needs_policy() and bool(
            size_fields(self._given.task, self.schema.n_classes) - self.explicit_params.keys())

    def _resolve(self, records: float | None, epsilon: float | None = None) -> SGBDTParams:
        """Explicit parameters over the default policy at ``records`` (a provisional
        :data:`PRIOR_RECORDS` until a fit knows better, and for good when no parameter the
        policy decides depends on it), with the model's ``epsilon``."""
        explicit = dict(self.explicit_params)
        if epsilon is not None:
            explicit["epsilon"] = epsilon
        if self._needs_policy():
            policy = default_params(self._given.task, self._given.epsilon,
                                    PRIOR_RECORDS if records is None else records,
                                    self.schema.n_classes, n_numeric=self.schema.n_numeric)
            explicit = policy | explicit
            if "feature_selection" not in self.explicit_params:  # judged on the final rounds
                explicit["feature_selection"] = covering_selection(explicit,
                                                                   self.schema.n_features)
        params = SGBDTParams(**explicit)
        if records is not None or not self._needs_size():  # not on a provisional size: the
            warn_unread(self.explicit_params, params.feature_selection)  # fit's may differ
        return params

    # ------------------------------------------------------------------ training
    def fit(self, X: np.ndarray, y: np.ndarray) -> SGBDT:
        """Train on all rows: DP initial score, the private split grid if ``grid_share``
        buys one, then ``total_rounds`` rounds.

        Parameters the caller did not give come from the default policy
        (:mod:`renyiboost.models.defaults`), which needs the number of rows. It is private,
        so without ``expected_records`` a private fit first releases a Laplace count with
        5 % of ε (:class:`~renyiboost.accounting.SizeEstimate`) and trains with the rest;
        the guarantee reports the total.

        The number of rounds is fixed by the parameters (DEVELOPERS invariant 3): a round in
        which the filter admits nobody still releases its tree (noise-only leaves), because
        stopping early would tell whether some row still had budget.
        """
        check_fits_schema(self.params, self.schema)  # public: before a budget is charged
        if self._given.private and (self.expected_records is not None
                                    or not self._needs_size()):
            # parameters known before the count: a calibration that cannot reach ε fails
            # here, before an accountant is charged (cached, so the booster's is free)
            self.params.calibrate()
        elif self._given.private:
            # the size is bought first; what the trees keep of ε either calibrates at some
            # size or at none (a target past the conversion's reach fails at every size,
            # and was found after the accountant was charged: review W #5)
            rest = SizeEstimate.split(float(self._given.epsilon)).rest_epsilon
            # at the provisional size, which warns about nothing: the fit's may differ
            self._resolve(None, rest).calibrate()  # (it warned for its own: review D7 #4)
        X, y, _ = self._training_data(X, y)  # draws the target ε (a size estimate's too)
        self.size_estimate_epsilon = self.size_estimate_ = None
        self.stated_guarantee = None  # a new fit is neither the release read nor the choice
        self.loaded_release = None
        noise = noise_source(self.seed)
        if self.expected_records is None and self._needs_size():
            if self._given.private:
                split = SizeEstimate.split(float(self._given.epsilon))
                self.size_estimate_ = float(noise.add_laplace(y.size, split.laplace_scale))
                self.size_estimate_epsilon = split.epsilon
                self.params = self._resolve(self.size_estimate_, split.rest_epsilon)
            else:
                self.params = self._resolve(y.size)
        # δ against the public hint, else the noisy count, else the prior: never the exact
        # count, which a warning (logs keep it) would give away
        records = self.expected_records if self.expected_records is not None else (
            self.size_estimate_)
        check_privacy_inputs(self._given.epsilon, self._given.delta, records,
                             counted=self.expected_records is None and records is not None)
        booster = SGBDTBooster(self.params, self.schema, self.seed, noise=noise)
        pool = RecordPool.from_arrays(X, booster.loss.scale(y), n_outputs=booster.n_outputs)
        score, pool.spent = booster.initial_score(pool)
        booster.ensemble.init_score = score
        pool.margin[:] = score
        if self.params.grid_share > 0:
            pool.spent = booster.release_split_grid(pool)
        spans = booster.smoothing_spans
        self.smoothing_spans_ = None if spans is None else spans.tolist()
        self.operator_history_ = []
        every = self.params.trees_per_gradient
        gradient_margin = None
        while booster.rounds_done < self.params.total_rounds:
            if every > 1 and booster.rounds_done % every == 0:
                gradient_margin = pool.margin.copy()  # batched boosting: one refresh per batch
            outcome = booster.plan_round(pool, gradient_margin=gradient_margin)
            booster.apply_round(pool, outcome)
            self.operator_history_.append(
                {"eligible": outcome.n_eligible, "sampled": outcome.n_sampled,
                 "retired": int(pool.retired.sum())}
            )
        self.booster, self.ensemble = booster, booster.ensemble
        return self

    # ------------------------------------------------------------------ prediction
    # ------------------------------------------------------------------ public release
    def privacy_guarantee(self) -> PrivacyGuarantee:
        """ε, δ, α̂, σ and B per row (public: functions of the parameters only); for the
        choice of a private selection, the selection's total ε and δ."""
        if self.stated_guarantee is not None:
            return self.stated_guarantee
        booster = self.booster
        cal = booster.calibration if booster is not None else None
        if cal is None and self.params.private:
            raise RuntimeError("this SGBDT is not fitted yet; call fit(X, y) first")
        return PrivacyGuarantee.of(cal, "row", self.seed is not None, self.size_estimate_epsilon)

    def release(self, model: str | None = None) -> ModelRelease:
        """The fitted model as a public release (trees, schema, parameters, guarantee),
        named ``model`` (default ``"sgbdt"``); a model read by :meth:`from_json` gives the
        release it read (under its own name unless ``model`` is given)."""
        if (loaded := self.loaded_release) is not None:
            return loaded if model in (None, loaded.model) else loaded.model_copy(
                update={"model": model})
        ens = self._ensemble()
        return ModelRelease(
            format=RELEASE_FORMAT, model=model or "sgbdt", store_id=None, epoch=None,
            version=ens.n_trees + 1,
            task=self.params.task, depth=self.params.depth,
            public_schema=self.schema.model_dump(mode="json"),
            params=self.params.model_dump(mode="json"),
            init_score=np.asarray(ens.init_score).tolist(),
            max_trees=None,
            trees=released_trees(ens.features, ens.thresholds, ens.leaves, 0),
            guarantee=self.privacy_guarantee(),
            smoothing_spans=self.smoothing_spans_,
            answer_map=ens.answer_map,
        )

    def to_json(self) -> str:
        """The released model as JSON: :meth:`release` and nothing else (no counts)."""
        return self.release().model_dump_json()

    @classmethod
    def from_json(cls, text: str) -> SGBDT:
        release = ModelRelease.model_validate_json(text).check_whole()
        with warnings.catch_warnings():  # every parameter is the release's, none a choice
            warnings.filterwarnings("ignore", message="mains_cycles=", category=UserWarning)
            model = cls(PublicSchema(**release.public_schema), **release.params)
        schema = model.schema
        model.smoothing_spans_ = release.smoothing_spans
        model.ensemble = Ensemble.for_schema(
            schema, release.depth, model.params.smoothing,
            init_score=np.asarray(release.init_score, dtype=float)
            if schema.n_outputs > 1 else float(release.init_score),
            spans=release.smoothing_spans)
        model.ensemble.answer_map = release.answer_map
        for tree in release.trees:
            model.ensemble.append(np.asarray(tree.features, dtype=np.int64),
                                  np.asarray(tree.thresholds, dtype=float),
                                  np.asarray(tree.leaves, dtype=float))
        # its guarantee follows from its params: a batch fit's per row, a stream's per key
        check_stated_guarantee(release.guarantee, model.params,
                               "row" if release.store_id is None else "key")
        model.stated_guarantee = release.guarantee
        model.loaded_release = release
        return model


def check_stated_guarantee(stated: PrivacyGuarantee, params: SGBDTParams,
                           unit: str) -> None:
    """Refuse a release whose guarantee claims less than its parameters spend: its trees'
    σ, order and budget are those of ``params``' calibration, and its ε and δ at least
    theirs (a private selection states its larger total: :func:`~renyiboost.models.tuning.
    private_tune`; a batch fit adds its size estimate's ε, which is never negative). A
    release written by hand with ``params.epsilon = 50`` under a guarantee of ε = 1 was read
    and exported again as ε = 1 (review P #3), a stream's release too (review D6). ``unit``:
    ``"row"`` for a batch fit's release, ``"key"`` for a stream's."""
    if stated.private != params.private or (stated.private and stated.unit != unit):
        raise ValueError(f"the release's guarantee (private={stated.private}, unit="
                         f"{stated.unit!r}) is not that of a model with its params "
                         f"(epsilon={params.epsilon}, unit {unit!r})")
    if not params.private:
        return
    own = PrivacyGuarantee.of(params.calibrate(), unit, stated.seeded_for_testing,
                              stated.size_estimate_epsilon)
    below = [name for name in ("epsilon", "delta", "budget_rdp")
             if getattr(stated, name) is None
             or getattr(stated, name) < getattr(own, name) * (1 - 1e-9)]
    if stated.order != own.order or stated.sigma is None or not math.isclose(
            stated.sigma, own.sigma, rel_tol=1e-9) or below:
        raise ValueError(
            f"the release's guarantee (epsilon={stated.epsilon}, delta={stated.delta}, order="
            f"{stated.order}, sigma={stated.sigma}) is not what its params spend (epsilon="
            f"{own.epsilon}, delta={own.delta}, order={own.order}, sigma={own.sigma})")
