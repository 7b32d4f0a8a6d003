"""Batch S-GBDT estimator over numpy arrays (fit once, predict many).

The streaming engine and the River estimators drive the same :class:`SGBDTBooster`; this
class is the plain array interface used by the reproduction experiments.
"""

from __future__ import annotations

import json
from typing import Any

import numpy as np
from scipy.special import expit

from renyiboost.models.booster import RecordPool, SGBDTBooster, SGBDTParams
from renyiboost.models.losses import unscale_margin
from renyiboost.models.trees import Ensemble
from renyiboost.schema import PublicSchema

MODEL_FORMAT = "renyiboost.sgbdt/1"


class SGBDT:
    """Differentially private gradient-boosted random trees (S-GBDT) for arrays.

    Parameters
    ----------
    schema
        Public feature bounds/domains (and ``target_bounds`` for regression). ``X`` passed to
        :meth:`fit` and :meth:`predict` is encoded as by :meth:`PublicSchema.encode_columns`.
    seed
        ``None`` for CSPRNG noise (production); an integer for reproducible tests only.
    **params
        Any field of :class:`SGBDTParams` (``task``, ``epsilon``, ``delta``, ``rounds`` …).

    Examples
    --------
    >>> import numpy as np
    >>> from renyiboost.schema import PublicSchema
    >>> rng = np.random.default_rng(0)
    >>> X = rng.uniform(0, 1, size=(2000, 2)); y = 3 * X[:, 0] + rng.normal(0, 0.1, 2000)
    >>> schema = PublicSchema(features={"a": (0, 1), "b": (0, 1)}, target_bounds=(0, 3))
    >>> model = SGBDT(schema, epsilon=1.0, rounds=30, depth=3, learning_rate=0.3,
    ...               sampling_rate=0.5, seed=1).fit(X, y)   # doctest: +SKIP
    >>> model.privacy_report()["epsilon"] <= 1.0   # doctest: +SKIP
    True
    """

    def __init__(self, schema: PublicSchema, seed: int | None = None, **params: Any) -> None:
        self.schema = schema
        self.seed = seed
        self.params = SGBDTParams(**params)
        self.booster: SGBDTBooster | None = None
        self.ensemble: Ensemble | None = None
        self.history: list[dict[str, int]] = []

    # ------------------------------------------------------------------ training
    def _validate_target(self, y: np.ndarray) -> np.ndarray:
        y = np.asarray(y, dtype=float)
        if y.ndim != 1 or not np.all(np.isfinite(y)):
            raise ValueError("y must be a 1-D array of finite numbers")
        if self.params.task == "classification" and not np.all((y == 0) | (y == 1)):
            raise ValueError("classification labels must be 0 or 1")
        return y

    def fit(self, X: np.ndarray, y: np.ndarray) -> SGBDT:
        """Train on all rows: DP initial score, then rounds until the budget is used up."""
        X = self.schema.clip_encoded(X)
        y = self._validate_target(y)
        if X.shape[0] != y.shape[0]:
            raise ValueError(f"X has {X.shape[0]} rows but y has {y.shape[0]}")
        booster = SGBDTBooster(self.params, self.schema, self.seed)
        pool = RecordPool.from_arrays(X, booster.loss.scale(y))
        score, pool.spent = booster.initial_score(pool)
        booster.ensemble.init_score = score
        pool.margin[:] = score
        self.history = []
        while booster.rounds_done < self.params.total_rounds:
            outcome = booster.plan_round(pool)
            if outcome.n_eligible == 0:
                break
            booster.apply_round(pool, outcome)
            self.history.append(
                {"eligible": outcome.n_eligible, "sampled": outcome.n_sampled,
                 "retired": int(pool.retired.sum())}
            )
        self.booster, self.ensemble = booster, booster.ensemble
        self.max_spent_rdp_ = float(pool.spent.max()) if len(pool) else 0.0
        return self

    # ------------------------------------------------------------------ prediction
    def _ensemble(self) -> Ensemble:
        if self.ensemble is None:
            raise RuntimeError("this SGBDT is not fitted yet; call fit(X, y) first")
        return self.ensemble

    def decision_function(self, X: np.ndarray) -> np.ndarray:
        """The raw margin (scaled target for regression, log-odds for classification)."""
        return self._ensemble().predict_margin(self.schema.clip_encoded(np.atleast_2d(X)))

    def predict(self, X: np.ndarray) -> np.ndarray:
        margin = self.decision_function(X)
        if self.params.task == "regression":
            return unscale_margin(margin, self.schema.target_bounds)  # type: ignore[arg-type]
        return (margin > 0).astype(np.int64)

    def predict_proba(self, X: np.ndarray) -> np.ndarray:
        if self.params.task != "classification":
            raise AttributeError("predict_proba is for task='classification'")
        p = expit(self.decision_function(X))
        return np.column_stack([1.0 - p, p])

    # ------------------------------------------------------------------ reporting and I/O
    def privacy_report(self) -> dict[str, Any]:
        booster = self.booster
        cal = booster.calibration if booster is not None else None
        return {
            "private": self.params.private,
            "epsilon": cal.epsilon if cal else float("inf"),
            "delta": cal.delta if cal else None,
            "order": cal.order if cal else None,
            "sigma": cal.sigma if cal else None,
            "budget_rdp": cal.budget_rdp if cal else None,
            "max_spent_rdp": getattr(self, "max_spent_rdp_", 0.0),
            "n_trees": self.ensemble.n_trees if self.ensemble else 0,
            "seeded_for_testing": self.seed is not None,
        }

    def to_json(self) -> str:
        """The released model as JSON (public: schema, parameters, trees, privacy report)."""
        return json.dumps(
            {
                "format": MODEL_FORMAT,
                "schema": self.schema.model_dump(mode="json"),
                "params": self.params.model_dump(mode="json"),
                "ensemble": self._ensemble().to_dict(),
                "privacy": self.privacy_report(),
            }
        )

    @classmethod
    def from_json(cls, text: str) -> SGBDT:
        data = json.loads(text)
        if data.get("format") != MODEL_FORMAT:
            raise ValueError(f"not a {MODEL_FORMAT} model: format={data.get('format')!r}")
        model = cls(PublicSchema(**data["schema"]), **data["params"])
        model.ensemble = Ensemble.from_dict(data["ensemble"])
        model.imported_privacy_report = data["privacy"]
        return model
