"""Evaluation metrics (numpy only, no scikit-learn at run time)."""

from __future__ import annotations

import numpy as np
from scipy.stats import rankdata


def r2_score(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """Coefficient of determination 1 − SS_res / SS_tot."""
    y_true, y_pred = np.asarray(y_true, float), np.asarray(y_pred, float)
    ss_tot = float(((y_true - y_true.mean()) ** 2).sum())
    return 1.0 - float(((y_true - y_pred) ** 2).sum()) / ss_tot


def error_rate(y_true: np.ndarray, proba: np.ndarray, threshold: float = 0.5) -> float:
    """Misclassification rate in percent at a fixed probability threshold."""
    predicted = np.asarray(proba) > threshold
    return 100.0 * float(np.mean(predicted != np.asarray(y_true).astype(bool)))


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


def roc_auc(y_true: np.ndarray, score: np.ndarray) -> float:
    """Area under the ROC curve by the Mann–Whitney rank statistic (ties get mid-ranks)."""
    y = np.asarray(y_true).astype(bool)
    n_pos, n_neg = int(y.sum()), int((~y).sum())
    if n_pos == 0 or n_neg == 0:
        raise ValueError("roc_auc needs both classes in y_true")
    ranks = rankdata(np.asarray(score, float))
    return float((ranks[y].sum() - n_pos * (n_pos + 1) / 2) / (n_pos * n_neg))
