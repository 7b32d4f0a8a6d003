"""Resharding benchmark (issue 14): how long the trainer stops for ``renyiboost reshard``.

    .venv/bin/python benchmarks/reshard_bench.py [--quick]

A deployment of 2 SQLite shards (10 features, production noise ``seed=None``) holding
``n`` keys after its initial score and 5 rounds is resharded to 3 shards; beside it, in the
same run, the peer is what any restart of that deployment costs: opening it (restoring every
shard from its store) and closing it. Prints both and their ratio; writes
``results/reshard.{json,md}`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np
from peers import synthetic_booster

from renyiboost.stream.engine import EngineConfig
from renyiboost.stream.reshard import reshard
from renyiboost.stream.sharded import ShardedEngine, create_shard_stores, shard_locations

RESULTS = Path(__file__).parent / "results"


def _deployment(directory: str, n: int) -> tuple[EngineConfig, list[str]]:
    booster, schema = synthetic_booster(10, 6, 1000)
    config = EngineConfig(public_schema=schema, params=booster.params, train_every=10**9,
                          warmup=1)
    locations = shard_locations(directory, 2)
    create_shard_stores(config, locations)
    engine = ShardedEngine(config, locations)
    rng = np.random.default_rng(0)
    engine.add(rng.uniform(size=(n, 10)), rng.uniform(size=n), [f"k{i}" for i in range(n)])
    engine.train(6)
    engine.close()
    return config, locations


def measure(n: int) -> dict[str, float]:
    with tempfile.TemporaryDirectory() as tmp:
        config, old = _deployment(tmp, n)
        start = time.perf_counter()
        ShardedEngine(config, old).close()
        reopen = time.perf_counter() - start
        start = time.perf_counter()
        reshard(config, old, shard_locations(tmp, 3, alone=False))
        seconds = time.perf_counter() - start
    return {"keys": n, "reshard_s": seconds, "reopen_s": reopen}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10⁴ and 10⁵ keys")
    args = parser.parse_args()
    load = os.getloadavg()
    sizes = [10_000, 100_000] if args.quick else [100_000, 1_000_000]
    lines = [(f"Machine: {os.cpu_count()} vCPUs, load average before {load[0]:.2f}; "
              "production noise (seed=None); SQLite stores, 2 → 3 shards."), "",
             "| active keys | reshard | reopen the deployment (peer) | ratio |",
             "|---:|---:|---:|---:|"]
    rows = []
    for n in sizes:
        row = measure(n)
        rows.append(row)
        ratio = row["reshard_s"] / row["reopen_s"]
        print(f"{n:,} keys: reshard 2 → 3 shards {row['reshard_s']:.2f} s, reopening the "
              f"deployment {row['reopen_s']:.2f} s; ratio {ratio:.1f}", flush=True)
        lines.append(f"| {n:,} | {row['reshard_s']:.2f} s | {row['reopen_s']:.2f} s | "
                     f"{ratio:.1f}× |")
    after = os.getloadavg()
    print(f"load average before {load[0]:.2f}, after {after[0]:.2f}")
    if not args.quick:
        RESULTS.mkdir(exist_ok=True)
        (RESULTS / "reshard.json").write_text(json.dumps(
            {"load_before": load, "load_after": after, "rows": rows}, indent=2) + "\n")
        (RESULTS / "reshard.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
