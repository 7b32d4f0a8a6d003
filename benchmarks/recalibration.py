"""Check the answers' recalibration constants on development rows only (``make
recalibration``).

    .venv/bin/python benchmarks/recalibration.py [--sets adult,agrawal,sea] [--seeds 3]
                                                 [--epsilon 1] [--every 10000,20000,40000]
                                                 [--shares 0.025,0.05,0.1] [--workers 2]

:data:`~renyiboost.models.defaults.RECALIBRATION_EVERY` (positions a window) and
:data:`~renyiboost.models.defaults.RECALIBRATION_SHARE` (the share of B a key of an open
window pays) were first chosen by emulation against Adult's *official test split* (its
base rate 0.246). This run checks them without any test split: each imbalanced
binary set of the development suite (Adult's training split, Agrawal, SEA; base rates
0.25, 0.67, 0.68) becomes an unbounded i.i.d. stream (:func:`defaults.iid_split`: 200,000
positions drawn from 80 % of its rows, each a new key) and is measured on the other 20 %.
Every ``(every, share)`` of the grid, and no recalibration, sees the same draws and split
of a seed, so the differences are paired.

The rule, fixed before the run: the candidate with the smallest mean log loss over sets
and seeds wins; the current constants stay unless the winner beats them beyond two
standard errors of the paired difference (so with few seeds it keeps them: a check,
not a fresh choice). Log loss is a proper score, so it rewards a
calibrated mean and sharp answers alone: the mean predicted probability against the base
rate and the AUC are printed beside it. Seeds are development seeds (below
``defaults.REPORT_SEEDS``).

Prints one table, writes ``benchmarks/results/recalibration-<ε>.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import defaults
import numpy as np

#: The windows (positions) and shares of B the run compares.
EVERY = (10_000, 20_000, 40_000)
SHARES = (0.025, 0.05, 0.1)


def window_cell(name: str, epsilon: float, seed: int,
                policy: tuple[int, float] | None) -> dict[str, Any]:
    """One stream of ``name`` with the recalibration ``policy`` (``(every, share)``, or
    ``None``: none), scored on the held-out fifth."""
    defaults._quiet()
    from sklearn.metrics import log_loss, roc_auc_score

    train, test, draws = defaults.iid_split(name, seed)
    recalibration = None if policy is None else {"every": policy[0], "share": policy[1]}
    p = defaults.iid_stream(train, test, draws, epsilon, recalibration=recalibration)
    positive = test.y == test.y.max()
    return {"set": name, "epsilon": epsilon, "seed": seed, "policy": policy,
            "base_rate": float(positive.mean()), "mean_p": float(p.mean()),
            "log_loss": float(log_loss(positive, np.clip(p, 1e-12, 1 - 1e-12))),
            "auc": float(roc_auc_score(positive, p))}


def _table(rows: list[dict[str, Any]], current: tuple[int, float]) -> str:
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    names = list(dict.fromkeys(r["set"] for r in rows))

    def of(policy: Any, name: str | None = None) -> list[dict[str, Any]]:
        return sorted((r for r in rows if r["policy"] == policy
                       and (name is None or r["set"] == name)),
                      key=lambda r: (r["set"], r["seed"]))

    out = ["| window, share | " + " | ".join(
        f"{n}: mean p − rate, AUC, log loss" for n in names) + " | mean log loss "
        "(paired vs current) |", "|---" * (len(names) + 2) + "|"]
    base = np.array([r["log_loss"] for r in of(current)])
    for policy in policies:
        cells = []
        for name in names:
            rs = of(policy, name)
            gap = np.mean([r["mean_p"] - r["base_rate"] for r in rs])
            cells.append(f"{gap:+.3f}, {np.mean([r['auc'] for r in rs]):.4f}, "
                         f"{np.mean([r['log_loss'] for r in rs]):.4f}")
        losses = np.array([r["log_loss"] for r in of(policy)])
        difference = losses - base
        se = difference.std(ddof=1) / np.sqrt(difference.size) if difference.size > 1 else 0.0
        label = "none" if policy is None else f"{policy[0]:,}, {policy[1]:g}"
        out.append(f"| {label} | " + " | ".join(cells)
                   + f" | {losses.mean():.4f} ({difference.mean():+.4f} ± {se:.4f}) |")
    return "\n".join(out)


def main(argv: list[str] | None = None) -> int:
    from renyiboost.models.defaults import RECALIBRATION_EVERY, RECALIBRATION_SHARE

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--sets", default="adult,agrawal,sea")
    parser.add_argument("--seeds", type=int, default=3, help="development seeds 0, 1, ...")
    parser.add_argument("--epsilon", type=float, default=1.0)
    parser.add_argument("--every", default=",".join(map(str, EVERY)),
                        help="windows to compare, in positions")
    parser.add_argument("--shares", default=",".join(map(str, SHARES)),
                        help="shares of B to compare")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    if args.seeds > defaults.REPORT_SEEDS:
        parser.error(f"--seeds must stay below the report seeds ({defaults.REPORT_SEEDS})")
    current = (RECALIBRATION_EVERY, RECALIBRATION_SHARE)
    policies: list[tuple[int, float] | None] = [None, *(
        (int(every), float(share)) for every in args.every.split(",")
        for share in args.shares.split(","))]
    if current not in policies:
        policies.append(current)  # the paired differences are taken against it
    jobs = [(name, args.epsilon, seed, policy) for name in args.sets.split(",")
            for seed in range(args.seeds) for policy in policies]
    started, load = time.perf_counter(), os.getloadavg()[0]
    with ProcessPoolExecutor(args.workers) as pool:
        rows = list(pool.map(window_cell, *zip(*jobs)))
    elapsed = time.perf_counter() - started
    text = (f"{_table(rows, current)}\n\n{len(jobs)} streams at ε = {args.epsilon:g} in "
            f"{elapsed:.0f} s on {args.workers} workers (load average {load:.2f} at the "
            f"start); current: {current}")
    print(text)
    stem = f"recalibration-{args.epsilon:g}"  # "0.5" is no suffix: no with_suffix
    defaults.RESULTS.mkdir(parents=True, exist_ok=True)
    (defaults.RESULTS / f"{stem}.md").write_text(text + "\n")
    (defaults.RESULTS / f"{stem}.json").write_text(json.dumps(
        {"epsilon": args.epsilon, "delta": defaults.DELTA, "seconds": elapsed,
         "load_at_start": load, "commit": defaults._commit(), "rows": rows}, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
