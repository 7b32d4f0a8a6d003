"""renyiboost: differentially private gradient-boosted trees on event streams.

S-GBDT (Kirschte et al.) with an individual Rényi filter: every key carries its own Rényi-DP
budget, so the model keeps learning from new records at no extra ε.
"""

from renyiboost.models.estimators import SGBDTClassifier, SGBDTRegressor

__version__ = "0.1.0"

__all__ = ["SGBDTClassifier", "SGBDTRegressor", "__version__"]
