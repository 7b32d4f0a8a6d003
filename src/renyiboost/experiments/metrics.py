"""Held-out metrics, from scikit-learn (``sklearn.metrics``): R², error rate and ROC AUC
under the names and units the experiments' tables use; and the spread of repeated runs."""

from __future__ import annotations

import numpy as np
from sklearn import metrics


def sample_std(values: object) -> float:
    """The sample standard deviation (ddof 1) of repeated runs, 0 for a single run: the
    tables' "± sd" and the paper verdicts' "within one sd" used the population one, 1/√2 of
    it at the default two repeats (review F #4)."""
    v = np.asarray(values, dtype=float)
    return float(np.std(v, ddof=1)) if v.size > 1 else 0.0


def r2_score(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination 1 − SS_res / SS_tot."""
    return float(metrics.r2_score(y_true, y_pred))


def error_rate(y_true: np.ndarray, proba: np.ndarray, threshold: float = 0.5) -> float:
    """Misclassification rate in percent at a fixed probability threshold."""
    predicted = np.asarray(proba) > threshold
    return 100.0 * (1.0 - float(metrics.accuracy_score(np.asarray(y_true).astype(bool),
                                                       predicted)))


def roc_auc(y_true: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve (ties count half); ``ValueError`` without both classes."""
    y = np.asarray(y_true).astype(bool)
    if y.all() or not y.any():
        raise ValueError("roc_auc needs both classes in y_true")
    return float(metrics.roc_auc_score(y, np.asarray(score, dtype=float)))


def held_out_metrics(task: str, y_true: np.ndarray, score: np.ndarray) -> dict[str, float]:
    """R² of a regression prediction; error % and AUC of class-1 scores (AUC 0.5 when all
    scores are equal, e.g. a constant model); error % of a multiclass probability matrix
    (``y_true`` then holds class indices)."""
    if task == "regression":
        return {"r2": r2_score(y_true, score)}
    if np.ndim(score) == 2:  # multiclass: score holds the probability of every class
        return {"error": 100.0 * float(np.mean(score.argmax(axis=1) != y_true))}
    auc = roc_auc(y_true, score) if np.ptp(score) > 0 else 0.5
    return {"error": error_rate(y_true, score), "auc": auc}
