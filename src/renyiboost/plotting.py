"""The one door to matplotlib: plotting is the optional ``plot`` extra.

Only the demo's plot, the experiments' figures and the additive model's shape plot draw;
the library, the trainer and the server never import matplotlib (65 MB with fonttools).
"""

from __future__ import annotations

from typing import Any


def pyplot() -> Any:
    """``matplotlib.pyplot`` on the non-interactive Agg backend, or an ``ImportError`` that
    names the extra to install."""
    try:
        import matplotlib
    except ImportError as missing:
        raise ImportError("plotting needs matplotlib: pip install 'renyiboost[plot]'"
                          ) from missing
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
