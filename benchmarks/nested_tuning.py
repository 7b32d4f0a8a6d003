"""How much Abalone's tuned config gains from seeing the test folds (``make nested-tuning``).

    .venv/bin/python benchmarks/nested_tuning.py [--epsilons 0.15,0.54] [--candidates 80]
                                                  [--seeds 2] [--repeats 5] [--workers 2]

``renyiboost tune --dataset abalone`` scores a candidate by its validation R² averaged over
an 80/20 split inside each of the five outer training folds, and one winner serves all five
folds of the reproduction. Those five inner splits together read every row, so each outer
test fold helped choose the config it is then scored on. A nested search does not: fold
``k``'s config is the best on fold ``k``'s own inner split, which holds none of its test rows.

This run measures the difference on one search: the tuner's own candidate pool (numpy seed
12345, :func:`renyiboost.experiments.tune.sample_candidate`) and its noise seeds, every
candidate scored on every fold's inner split once. Pooled: the candidate with the best mean
over the folds (what ``tune`` picks). Nested: per fold, the best on that fold's split.
Both are then fitted on each outer training fold and scored on its test fold with the
reproduction's noise seeds (``1000 + 100·repeat + fold``), so the differences are paired.
The pooled column is optimistic by construction; the nested one is what a clean search of
this size gives. The committed configs came from larger searches (``configs/abalone.json``),
so this measures the size of the leak, not those configs.

Prints one table, writes ``benchmarks/results/nested-tuning.md`` and ``.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from concurrent.futures import ProcessPoolExecutor
from typing import Any

import numpy as np

RESULTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "results")


def _inner(job: tuple[float, dict[str, Any], int, int]) -> float:
    """Validation R² of one candidate on one fold's inner split (the tuner's seed)."""
    from renyiboost.exceptions import ignore_comparison_warnings
    from renyiboost.experiments.reproduce import _score, fit_sgbdt, splits
    from renyiboost.experiments.tune import validation_splits

    epsilon, params, seed, fold = job
    ignore_comparison_warnings()
    data, _ = splits("abalone")
    split = validation_splits("abalone")[fold]
    return _score(data.task, fit_sgbdt(data, params, epsilon, seed + fold, split), split)["r2"]


def _outer(job: tuple[float, dict[str, Any], int, int]) -> float:
    """Test R² of a config on one outer fold (the reproduction's seed)."""
    from renyiboost.exceptions import ignore_comparison_warnings
    from renyiboost.experiments.reproduce import _score, fit_sgbdt, splits

    epsilon, params, repeat, fold = job
    ignore_comparison_warnings()
    data, outer = splits("abalone")
    model = fit_sgbdt(data, params, epsilon, 1000 + 100 * repeat + fold, outer[fold])
    return _score(data.task, model, outer[fold])["r2"]


def measure(epsilon: float, candidates: int, seeds: int, repeats: int,
            pool: ProcessPoolExecutor) -> dict[str, Any]:
    from renyiboost.experiments.tune import SPACES, sample_candidate

    rng = np.random.default_rng(12345)
    space = [sample_candidate(SPACES["abalone"], rng) for _ in range(candidates)]
    jobs = [(epsilon, params, 10_000 * s, k) for params in space for s in range(seeds)
            for k in range(5)]
    scores = np.array(list(pool.map(_inner, jobs, chunksize=4))).reshape(
        candidates, seeds, 5).mean(axis=1)  # [candidate, fold]
    pooled = int(np.argmax(scores.mean(axis=1)))
    nested = [int(np.argmax(scores[:, k])) for k in range(5)]
    test_jobs = [(epsilon, space[choice[k]], r, k) for choice in ([pooled] * 5, nested)
                 for r in range(repeats) for k in range(5)]  # the same (r, k) order: paired
    test = np.array(list(pool.map(_outer, test_jobs))).reshape(2, repeats * 5)
    difference = test[0] - test[1]
    return {"epsilon": epsilon, "candidates": candidates, "seeds": seeds, "repeats": repeats,
            "pooled_choice": pooled, "nested_choices": nested,
            "pooled_validation": float(scores[pooled].mean()),
            "nested_validation": float(np.mean([scores[c, k] for k, c in enumerate(nested)])),
            "pooled_test": test[0].tolist(), "nested_test": test[1].tolist(),
            "pooled_minus_nested": float(difference.mean()),
            "standard_error": float(difference.std(ddof=1) / np.sqrt(difference.size))}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--epsilons", default="0.15,0.54")
    parser.add_argument("--candidates", type=int, default=80)
    parser.add_argument("--seeds", type=int, default=2, help="noise seeds a candidate")
    parser.add_argument("--repeats", type=int, default=5, help="test noise seeds a fold")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args(argv)
    started, load = time.perf_counter(), os.getloadavg()[0]
    with ProcessPoolExecutor(args.workers) as pool:
        rows = [measure(float(e), args.candidates, args.seeds, args.repeats, pool)
                for e in args.epsilons.split(",")]
    elapsed = time.perf_counter() - started
    header = ("| ε | pooled choice: validation R², test R² | nested choices: validation R², "
              "test R² | test, pooled − nested (paired) |")
    lines = [header, "|---|---|---|---|"]
    for row in rows:
        lines.append(
            f"| {row['epsilon']:g} | {row['pooled_validation']:.3f}, "
            f"{np.mean(row['pooled_test']):.3f} ± {np.std(row['pooled_test'], ddof=1):.3f} | "
            f"{row['nested_validation']:.3f}, {np.mean(row['nested_test']):.3f} ± "
            f"{np.std(row['nested_test'], ddof=1):.3f} | {row['pooled_minus_nested']:+.4f} ± "
            f"{row['standard_error']:.4f} |")
    text = ("\n".join(lines) + f"\n\n{args.candidates} candidates × {args.seeds} seeds × 5 "
            f"folds, {args.repeats} test seeds a fold, in {elapsed:.0f} s on {args.workers} "
            f"workers (load average {load:.2f} at the start); choices: "
            + "; ".join(f"ε = {r['epsilon']:g}: pooled {r['pooled_choice']}, nested "
                        f"{r['nested_choices']}" for r in rows))
    print(text)
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "nested-tuning.md"), "w") as out:
        out.write(text + "\n")
    with open(os.path.join(RESULTS, "nested-tuning.json"), "w") as out:
        json.dump({"seconds": elapsed, "load_at_start": load, "rows": rows}, out, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
