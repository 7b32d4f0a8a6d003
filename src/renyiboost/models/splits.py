"""Split machinery shared by the learners that draw data-dependent splits privately
(:mod:`renyiboost.models.dpboost`, :mod:`renyiboost.models.diprime`): the intervals of the
continuous exponential mechanism and a grouped Gumbel-max draw.

**Gap intervals.** Over a numeric feature's public range ``[lo, hi]``, a node's rows cut the
range at their sorted values; any threshold inside one gap sends the same rows left (a row
goes left when ``x < threshold``; a missing value never does). A score that depends on the
rows only through who goes left is constant on a gap, so the continuous exponential
mechanism draws a gap with weight ``length · exp(score · ε / (2Δ))`` and the threshold
uniformly inside it (McSherry & Talwar 2007; the DP median of Smith 2011). No row value is
ever a threshold, and gaps of tied values have length 0 (weight 0).

**Grouped Gumbel-max.** For candidates in groups (a node, or a node and feature), the one
maximising ``log weight + Gumbel noise`` in each group is a draw proportional to the weights
(the exponential mechanism, one draw a group).
"""

from __future__ import annotations

import numpy as np

from renyiboost.randomness import NoiseSource


def gap_intervals(x: np.ndarray, weight: np.ndarray, pos: np.ndarray, n_nodes: int,
                  lo: float | np.ndarray, hi: float | np.ndarray) -> tuple[np.ndarray, ...]:
    """Every node's gaps of feature values ``x`` in ``[lo, hi]`` (one range for all nodes,
    or one a node, each holding its node's values): (node, summed ``weight`` and count of
    the rows left of the gap, low end, high end), the first gap of each node starting at
    its ``lo`` (nothing left of it)."""
    lo = np.broadcast_to(np.asarray(lo, dtype=float), (n_nodes,))
    hi = np.broadcast_to(np.asarray(hi, dtype=float), (n_nodes,))
    present = np.flatnonzero(~np.isnan(x))
    order = present[np.lexsort((x[present], pos[present]))]
    node, value = pos[order], x[order]
    cum_w, cum_n = np.cumsum(weight[order]), np.arange(1, order.size + 1, dtype=float)
    first = np.searchsorted(node, np.arange(n_nodes))  # each node's first sorted row
    base_w = np.concatenate([[0.0], cum_w])[first][node]
    base_n = first[node].astype(float)
    last_in_node = np.ones(node.size, dtype=bool)
    last_in_node[:-1] = node[1:] != node[:-1]
    upper = np.where(last_in_node, hi[node], np.append(value[1:], 0.0)[: node.size])
    has_rows = np.bincount(node, minlength=n_nodes) > 0
    start_upper = np.where(has_rows, value[np.minimum(first, max(order.size - 1, 0))]
                           if order.size else hi, hi)
    return (np.concatenate([np.arange(n_nodes), node]),
            np.concatenate([np.zeros(n_nodes), cum_w - base_w]),
            np.concatenate([np.zeros(n_nodes), cum_n - base_n]),
            np.concatenate([lo, value]),
            np.concatenate([start_upper, upper]))


def log_lengths(low: np.ndarray, high: np.ndarray) -> np.ndarray:
    """``log(high − low)``, −inf for an empty gap."""
    with np.errstate(divide="ignore"):
        return np.log(high - low)


def gumbel_argmax(log_weight: np.ndarray, group: np.ndarray, n_groups: int,
                  noise: NoiseSource) -> np.ndarray:
    """Per group ``0 … n_groups − 1``, the index of one candidate drawn with probability
    proportional to ``exp(log_weight)`` among the group's candidates (every group needs
    one)."""
    return grouped_argmax(log_weight - np.log(-np.log(noise.uniform(group.size))), group,
                          n_groups)


def grouped_argmax(value: np.ndarray, group: np.ndarray, n_groups: int) -> np.ndarray:
    """Per group ``0 … n_groups − 1``, the index of its largest ``value`` (the first of
    equals; every group needs one candidate)."""
    order = np.lexsort((-value, group))
    return order[np.searchsorted(group[order], np.arange(n_groups))]
