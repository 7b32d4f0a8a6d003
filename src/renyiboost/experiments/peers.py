"""Batch peers, run through their own packages (the optional ``experiments`` extra).

Every peer gets exactly the public information renyiboost gets — the schema's feature
bounds, category domains and target bounds — passed explicitly, so none of them reads a
bound from the data:

* ``dpebm`` — interpret's DP-EBM (``interpret.privacy.DPExplainableBoosting{Classifier,
  Regressor}``, Nori et al. 2021) with its defaults; numeric features get
  ``privacy_bounds``, categorical ones their public domain as an ordinal list of strings,
  regression targets ``privacy_target_min/max``. (ε, δ)-DP under its own accountant, but for
  one departure of interpret's own: its categorical binning bins only the categories the
  data hold and reads the exact row count (it favours the peer slightly).
* ``dpebm_tuned`` — the same with the learning rate and number of rounds of
  :data:`DPEBM_TUNED` (chosen on validation rows, see there); on a data set without an
  entry there (every set but Abalone and Adult) it is DP-EBM at its defaults.
* ``dprf`` — diffprivlib's ``RandomForestClassifier`` (Fletcher & Islam 2017) with
  ``bounds`` and ``classes`` given; pure ε-DP (δ = 0) as diffprivlib states it;
  classification only. One departure of diffprivlib's own: without ``shuffle`` (its
  default, 0.6.6) row i trains tree ``i // (n / T)``, so the private row count picks each
  row's tree, and one more row moves rows across up to T trees (the flaw our DPBoost and
  DiPriMe correct by drawing each row's tree by itself). It favours the peer.
* ``dpboost`` — our :class:`~renyiboost.models.dpboost.DPBoost` (Li et al. 2020, with its
  corrections: public split candidates, gain sensitivity 3 g*², no data-dependent scaling);
  pure ε-DP (δ unused), the paper's defaults. ``dpboost_naive``: the paper's baseline
  without gradient-based filtering and geometric leaf clipping.
* ``diprime`` — our :class:`~renyiboost.models.diprime.DiPriMe` forest (Consul & Williamson;
  DP-median splits, every candidate median charged, no public counts); pure ε-DP.
* ``fedxgb_ldp`` — our :class:`~renyiboost.models.fedxgboost.FedXGBoostLDP` (Le et al.
  2021; first-order splits on ε/T-LDP gradient reports, debiased, accounted per user over
  all rounds). *Label* LDP: the feature holder's rows are not protected.
* ``dp_gam`` — our :class:`~renyiboost.models.additive.DPAdditiveBoost` (DP-EBM-style
  additive boosting on public bins, GDP-accounted) with DP-EBM's published defaults.
* ``xgboost`` — ``xgboost.XGB{Regressor,Classifier}`` with its defaults: the non-private
  ceiling (ε = ∞);
* ``dp_mean`` — our own floor, :class:`~renyiboost.models.baselines.DPMeanBaseline` (one DP
  mean of the clipped labels), behind the same interface.

All wrappers share one interface: ``fit(X, y)`` on schema-encoded arrays and
``predict_score(X)`` → the regression prediction or the probability of class 1 (for a
schema with a multiclass label set: the probability of every class, in the order of the
public labels).
"""

from __future__ import annotations

import math
import warnings
from typing import Any, Protocol

import numpy as np

from renyiboost.models.additive import DPAdditiveBoost
from renyiboost.models.baselines import DPMeanBaseline
from renyiboost.models.diprime import DiPriMe
from renyiboost.models.dpboost import DPBoost
from renyiboost.models.fedxgboost import FedXGBoostLDP
from renyiboost.schema import PublicSchema

#: DP-EBM learning rate and rounds per data set (defaults: 0.01 and 300), chosen by the
#: validation R² / error averaged over ε ∈ {0.15, 0.54} (80/20 split of the first training
#: fold, that fold's test rows never read, though the other folds' test rows were among
#: them; 2 noise seeds) over learning rates {0.01, 0.03, 0.1} × rounds
#: {30, 100, 300, 1000, 3000}. Abalone (3,300 rows) wants *fewer* rounds: R² −0.14 / 0.18
#: at ε 0.15 / 0.54 vs −1.69 / 0.04 with the defaults; Adult wants more: 17.50 % / 15.85 %
#: vs 21.85 % / 20.42 %.
DPEBM_TUNED: dict[str, dict[str, Any]] = {
    "abalone": {"learning_rate": 0.03, "max_rounds": 30},
    "adult": {"learning_rate": 0.01, "max_rounds": 3000},
}

PEERS: tuple[str, ...] = ("dpebm", "dpebm_tuned", "dprf", "dpboost", "dpboost_naive",
                          "diprime", "dp_gam", "fedxgb_ldp", "xgboost", "dp_mean")
#: Peers that spend no privacy budget.
NON_PRIVATE_PEERS: frozenset[str] = frozenset({"xgboost"})


class BatchPeer(Protocol):
    def fit(self, X: np.ndarray, y: np.ndarray) -> BatchPeer: ...

    def predict_score(self, X: np.ndarray) -> np.ndarray: ...


class _Wrapped:
    """A scikit-learn style model behind :class:`BatchPeer`, with an input mapping."""

    def __init__(self, model: Any, task: str, to_input: Any = None) -> None:
        self.model, self.task = model, task
        self.to_input = to_input if to_input is not None else (lambda X: X)
        schema = getattr(model, "schema", None)
        #: One of our models over a schema with a public label set: labels go in as given
        #: (binary ones were cast to int, which failed for ``["no", "yes"]``).
        self.labelled = getattr(schema, "labels", None) is not None
        #: ... and with a multiclass one, every class's probability comes out.
        self.multiclass = getattr(schema, "n_outputs", 1) > 1

    def fit(self, X: np.ndarray, y: np.ndarray) -> _Wrapped:
        if self.task == "regression":
            target = np.asarray(y, float)
        elif self.labelled:
            target = np.asarray(y)
        else:
            try:
                target = np.asarray(y).astype(int)
            except ValueError:
                raise ValueError(f"{type(self.model).__name__} takes binary labels as 0 / 1 "
                                 "(the suite's coding); map the labels to 0 / 1 first") from None
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # peers warn about their own defaults
            self.model.fit(self.to_input(X), target)
        return self

    def predict_score(self, X: np.ndarray) -> np.ndarray:
        inputs = self.to_input(X)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            if self.task == "regression":
                return np.asarray(self.model.predict(inputs), dtype=float)
            proba = np.asarray(self.model.predict_proba(inputs), dtype=float)
        if self.multiclass:  # the model's classes in the public label order
            return proba
        classes = list(getattr(self.model, "classes_", [0, 1]))
        return proba[:, classes.index(1)] if 1 in classes else np.zeros(len(proba))


def as_peer(model: Any, task: str) -> BatchPeer:
    """A scikit-learn style model (``fit``, ``predict``, ``predict_proba``) as a peer."""
    return _Wrapped(model, task)


def _categories(schema: PublicSchema) -> list[list[str] | None]:
    """Each categorical feature's public values as strings, and last the schema's "other"
    value: ``"?"``, or as many ``"?"`` as it takes to be none of them (a real ``"?"``
    category was merged with "other"); ``None`` for a numeric feature."""
    domains: list[list[str] | None] = []
    for spec in schema.features.values():
        if not isinstance(spec, list):
            domains.append(None)
            continue
        values = [str(c) for c in spec]
        other = "?"
        while other in values:
            other += "?"
        domains.append([*values, other])
    return domains


def _decode_categories(schema: PublicSchema) -> Any:
    """Encoded array → object array whose categorical columns hold the category strings
    (an index past the domain, the schema's 'unknown' code, becomes its "other" value; a
    missing value, NaN, stays missing as ``None``: cast to an integer it indexed the
    lookup with INT64_MIN and the peer crashed, review F #5)."""
    domains = _categories(schema)

    def to_input(X: np.ndarray) -> np.ndarray:
        out = np.asarray(X, dtype=object).copy()
        for j, domain in enumerate(domains):
            if domain is not None:
                lookup = np.array(domain, dtype=object)
                column = np.asarray(X[:, j], dtype=float)
                missing = np.isnan(column)
                codes = np.minimum(np.where(missing, 0, column).astype(int), len(domain) - 1)
                out[:, j] = np.where(missing, None, lookup[codes])
        return out

    return to_input


def _dpebm(schema: PublicSchema, task: str, epsilon: float, delta: float, seed: int,
           **overrides: Any) -> BatchPeer:
    from interpret.privacy import DPExplainableBoostingClassifier, DPExplainableBoostingRegressor

    domains = _categories(schema)
    kwargs: dict[str, Any] = dict(
        feature_names=schema.names,
        # each domain with the schema's public "other" value, which a row may hold (without
        # it interpret refused such a training row: "values outside of the ordinal set")
        feature_types=[d if d is not None else "continuous" for d in domains],
        privacy_bounds={name: (float(lo), float(hi)) for name, d, lo, hi in
                        zip(schema.names, domains, schema.lower, schema.upper, strict=True)
                        if d is None},
        epsilon=epsilon, delta=delta, random_state=seed, n_jobs=1, **overrides,
    )
    if task == "regression":
        if schema.target_bounds is None:
            raise ValueError("DP-EBM regression needs public target_bounds")
        lo, hi = schema.target_bounds
        model: Any = DPExplainableBoostingRegressor(privacy_target_min=lo,
                                                    privacy_target_max=hi, **kwargs)
    else:
        model = DPExplainableBoostingClassifier(**kwargs)
    return _Wrapped(model, task, _decode_categories(schema))


def _dprf(schema: PublicSchema, task: str, epsilon: float, seed: int) -> BatchPeer:
    if task != "classification":
        raise ValueError("dprf is diffprivlib's RandomForestClassifier: classification only")
    from diffprivlib.models import RandomForestClassifier

    # categorical codes run 0 … n_categories (the last is the schema's 'unknown' code)
    upper = np.where(schema.is_categorical, schema.n_categories, schema.upper)
    model = RandomForestClassifier(epsilon=epsilon, bounds=(schema.lower, upper),
                                   classes=[0, 1], random_state=seed)
    return _Wrapped(model, task)


def _xgboost(task: str, seed: int) -> BatchPeer:
    import xgboost

    cls = xgboost.XGBRegressor if task == "regression" else xgboost.XGBClassifier
    return _Wrapped(cls(random_state=seed, n_jobs=1), task)


def make_peer(name: str, schema: PublicSchema, task: str, dataset: str, epsilon: float,
              delta: float, seed: int) -> BatchPeer:
    """The peer ``name`` for one run (``epsilon`` is ignored by the non-private ones)."""
    if name not in PEERS:
        raise ValueError(f"peer must be one of {PEERS}, got {name!r}")
    if name not in NON_PRIVATE_PEERS and not (epsilon > 0 and math.isfinite(epsilon)):
        raise ValueError(f"{name} is a DP peer and needs a finite epsilon > 0, got {epsilon}")
    if name == "dpebm":
        return _dpebm(schema, task, epsilon, delta, seed)
    if name == "dpebm_tuned":
        return _dpebm(schema, task, epsilon, delta, seed, **DPEBM_TUNED.get(dataset, {}))
    if name == "dprf":
        return _dprf(schema, task, epsilon, seed)
    if name == "dp_mean":
        return _Wrapped(DPMeanBaseline(schema, task, epsilon, delta, seed), task)
    if name == "dpboost":
        return _Wrapped(DPBoost(schema, seed, task=task, epsilon=epsilon), task)
    if name == "dpboost_naive":
        return _Wrapped(DPBoost(schema, seed, task=task, epsilon=epsilon,
                                gradient_filtering=False, leaf_clipping=False), task)
    if name == "diprime":
        return _Wrapped(DiPriMe(schema, seed, task=task, epsilon=epsilon), task)
    if name == "fedxgb_ldp":
        return _Wrapped(FedXGBoostLDP(schema, seed, task=task, epsilon=epsilon), task)
    if name == "dp_gam":
        return _Wrapped(DPAdditiveBoost(schema, seed, task=task, epsilon=epsilon, delta=delta),
                        task)
    return _xgboost(task, seed)


__all__ = ["DPEBM_TUNED", "NON_PRIVATE_PEERS", "PEERS", "BatchPeer", "as_peer", "make_peer"]
