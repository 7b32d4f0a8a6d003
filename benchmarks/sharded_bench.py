"""Sharded training benchmark (issue 14): shards as Ray actors on this machine.

    .venv/bin/python benchmarks/sharded_bench.py [--quick]

1. **Round time** at 10⁶ and 10⁷ active records (10 features, depth 6, γ = 0.1, production
   noise ``seed=None``) with 1 and 2 shard actors, beside the single in-process
   :class:`StreamEngine` (the peer: the engine without sharding) in the same run. A round is
   timed end to end at the coordinator: flush, sums, noise, install, durable.
2. **The coordinator**: its own milliseconds a round (tree, summing, noise) and the bytes a
   round moves (pickled, as Ray sends them): the tree out, every shard's sums back, the
   released tree out.
3. **Events/s from a 4-partition Kafka topic** to committed rounds with 1 and 2 shard actors
   (each shard reads its partitions, SQLite store a shard), beside the single
   :class:`KafkaTrainer` reading all four partitions, in the same run.
4. **A cost model** projecting 16 and 64 shards (one a machine) from the measured per-record
   shard cost, the coordinator's fixed cost and the per-call overhead.

Writes ``results/sharded.json`` and ``results/sharded.md`` (not with ``--quick``).
"""

from __future__ import annotations

import argparse
import json
import os
import pickle
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import numpy as np
import ray
from kafka_bench import _events, _produce
from peers import synthetic_booster

from renyiboost.connectors.kafka import (
    KafkaSettings,
    KafkaTrainer,
    ShardedKafkaTrainer,
    partition_map_for,
)
from renyiboost.connectors.local_broker import LocalBroker
from renyiboost.exceptions import ignore_comparison_warnings
from renyiboost.models.booster import SGBDTParams
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.ray_shards import RayShards
from renyiboost.stream.sharded import ShardedEngine, create_shard_stores, shard_locations
from renyiboost.stream.sources import InMemorySource
from renyiboost.stream.store import SQLiteStore

RESULTS = Path(__file__).parent / "results"
CHUNK = 1_000_000  # rows handed to the shards per call while filling them


def _round_config() -> EngineConfig:
    booster, schema = synthetic_booster(10, 6, 1000)
    return EngineConfig(public_schema=schema, params=booster.params, train_every=10**9,
                        warmup=1)


def _fill(add: Any, n: int) -> None:
    rng = np.random.default_rng(0)
    for start in range(0, n, CHUNK):
        m = min(CHUNK, n - start)
        add(rng.uniform(size=(m, 10)), rng.uniform(size=m),
            [f"k{i}" for i in range(start, start + m)])


def _median_round(train: Any, rounds: int) -> float:
    train(2)  # the initial score, and compiling the kernels in every process
    times = []
    for _ in range(rounds):
        start = time.perf_counter()
        train(1)
        times.append(time.perf_counter() - start)
    return float(np.median(times))


def single_round(n: int, rounds: int) -> float:
    engine = StreamEngine(_round_config())
    _fill(lambda X, y, keys: engine.add(X, y, keys), n)
    seconds = _median_round(engine.train, rounds)
    engine.close()
    return seconds


class _Metered:
    """A shard group that counts the bytes each call moves (pickled, as Ray sends them) and
    the time spent waiting for the shards, so the rest of a round is the coordinator's."""

    def __init__(self, group: RayShards) -> None:
        self.group, self.n = group, group.n
        self.bytes, self.waiting = 0, 0.0

    def all(self, method: str, *args: Any) -> list[Any]:
        start = time.perf_counter()
        results = self.group.all(method, *args)
        self.waiting += time.perf_counter() - start
        self.bytes += self.n * len(pickle.dumps(args)) + sum(map(len, map(pickle.dumps,
                                                                          results)))
        return results

    def __getattr__(self, name: str) -> Any:
        return getattr(self.group, name)


def sharded_round(n: int, n_shards: int, rounds: int) -> dict[str, float]:
    config = _round_config()
    shards = RayShards(config, [None] * n_shards, num_cpus=0)
    engine = ShardedEngine(config, shards)
    _fill(engine.add, n)
    wall = _median_round(engine.train, rounds)
    metered = _Metered(shards)
    engine.shards = metered
    start = time.perf_counter()
    engine.train(rounds)
    coordinator = (time.perf_counter() - start - metered.waiting) / rounds
    moved = metered.bytes / rounds
    start = time.perf_counter()
    for _ in range(50):  # the per-call overhead: a call to every shard that does nothing
        shards.all("state")
    call = (time.perf_counter() - start) / 50
    engine.close()
    return {"round_s": wall, "coordinator_s": coordinator, "call_s": call,
            "bytes_per_round": moved}


def _kafka_config() -> EngineConfig:
    params = SGBDTParams(task="regression", epsilon=1.0, rounds=20, depth=4,
                         sampling_rate=0.2, learning_rate=0.3)
    return EngineConfig(public_schema=InMemorySource("abalone").schema, params=params,
                        train_every=10_000, warmup=10_000)


def _settings(bootstrap: str, topic: str) -> KafkaSettings:
    return KafkaSettings(bootstrap_servers=bootstrap, topics=[topic],
                         group_id=f"g-{uuid.uuid4().hex[:6]}",
                         model_topic=f"{topic}.models.{uuid.uuid4().hex[:6]}", batch_size=5000)


def _throughput(poll: Any, positions: Any, n: int) -> float:
    while positions() == 0:
        poll()
    start, first = time.perf_counter(), positions()
    while positions() < n:
        poll()
    return (n - first) / (time.perf_counter() - start)


def kafka_single(bootstrap: str, topic: str, n: int, tmp: str) -> float:
    engine = StreamEngine(_kafka_config(), store=SQLiteStore(f"{tmp}/single-{uuid.uuid4().hex}.db",
                                                             create=True))
    trainer = KafkaTrainer(engine, _settings(bootstrap, topic))
    rate = _throughput(trainer.poll_once, lambda: engine.positions, n)
    engine.flush()
    trainer.close()
    engine.close()
    return rate


def kafka_sharded(bootstrap: str, topic: str, n: int, n_shards: int, tmp: str) -> float:
    config, settings = _kafka_config(), _settings(bootstrap, topic)
    directory = Path(tmp) / uuid.uuid4().hex
    directory.mkdir()
    locations = shard_locations(str(directory), n_shards)
    create_shard_stores(config, locations)
    source = KafkaTrainer.for_shard(settings, None, partition_map_for(settings, n_shards))
    engine = ShardedEngine(config, RayShards(config, locations, source=source, num_cpus=0))
    trainer = ShardedKafkaTrainer(engine, settings)
    rate = _throughput(trainer.poll_once, lambda: engine.positions, n)
    trainer.close()
    engine.close()
    return rate


def cost_model(rounds: dict[str, Any]) -> dict[str, Any]:
    """Round time with ``k`` shards, one a machine, for 10⁸ and 10⁹ active keys:

        T(k, N) = c · N / k  +  C  +  2 · (L + k · o)

    ``c``: a shard's seconds per active record (the single engine's round at 10⁷ over 10⁷:
    a shard runs the same kernels on its part of the pool); ``C``: the coordinator's own
    time a round (tree, summing, noise); a round makes two calls to every shard (sums, then
    commit), each costing the latency ``L`` plus a per-shard cost ``o`` at the coordinator
    (from the measured empty call to 1 and 2 shards; ``L`` is a same-machine figure: add the
    network's round trip between machines). Commits are not in it (memory shards; a shard's
    commit runs beside the next round, see the SQLite and PostgreSQL rows of ``run.py``).
    Memory bounds keys per shard: ~200 B per active key (issue 13), 5·10⁶ keys per GB.
    """
    at = rounds["10000000"]
    one, two = at["1"], at["2"]
    c = at["single_s"] / 1e7
    fixed = max(one["coordinator_s"], two["coordinator_s"])
    per_shard = max(two["call_s"] - one["call_s"], 0.0)
    latency = max(one["call_s"] - per_shard, 0.0)
    projection = {}
    for n_keys in (10**8, 10**9):
        for k in (16, 64):
            projection[f"{n_keys:.0e}_keys_{k}_shards_round_s"] = (
                c * n_keys / k + fixed + 2 * (latency + k * per_shard))
    return {"shard_s_per_record": c, "coordinator_fixed_s": fixed,
            "call_latency_s": latency, "call_per_shard_s": per_shard, **projection}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--quick", action="store_true", help="10⁵/10⁶ records, 20k events")
    args = parser.parse_args()
    ignore_comparison_warnings()
    sizes = [100_000, 1_000_000] if args.quick else [1_000_000, 10_000_000]
    n_events = 20_000 if args.quick else 200_000
    load = os.getloadavg()
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    results: dict[str, Any] = {"load_before": load, "cpus": os.cpu_count(), "rounds": {}}
    lines = [(f"Machine: {os.cpu_count()} vCPUs, load average before {load[0]:.2f}; "
              "production noise (seed=None); Ray local instance, one actor process a shard."), "",
             "| what | 1 shard | 2 shards | single engine (peer) | 2 shards / peer |",
             "|---|---:|---:|---:|---:|"]
    for n in sizes:
        repeats = 10 if n <= 10**6 else 5
        single = single_round(n, repeats)
        per = {str(k): sharded_round(n, k, repeats) for k in (1, 2)}
        results["rounds"][str(n)] = {**per, "single_s": single}
        one, two = per["1"]["round_s"], per["2"]["round_s"]
        print(f"round, {n:,} active records: 1 shard {1e3 * one:.1f} ms, 2 shards "
              f"{1e3 * two:.1f} ms, single engine {1e3 * single:.1f} ms; ratio single / 2 "
              f"shards {single / two:.2f}", flush=True)
        lines.append(f"| round, {n:,} active records | {1e3 * one:.1f} ms | {1e3 * two:.1f} ms "
                     f"| {1e3 * single:.1f} ms | {single / two:.2f}× |")
        for k in ("1", "2"):
            p = per[k]
            print(f"  coordinator, {k} shard(s): {1e3 * p['coordinator_s']:.2f} ms own time a "
                  f"round, {p['bytes_per_round']:,.0f} bytes a round, empty call to all "
                  f"shards {1e3 * p['call_s']:.2f} ms", flush=True)
    for k in ("1", "2"):
        p = results["rounds"][str(sizes[-1])][k]
        lines.append(f"| coordinator a round, {k} shard(s) | {1e3 * p['coordinator_s']:.2f} ms "
                     f"own, {p['bytes_per_round']:,.0f} B moved, {1e3 * p['call_s']:.2f} ms a "
                     "call to all shards | | | |")
    with tempfile.TemporaryDirectory() as tmp, LocalBroker(Path(tmp) / "tansu.log") as bootstrap:
        from confluent_kafka.admin import AdminClient, NewTopic

        topic = f"sharded-{uuid.uuid4().hex[:6]}"
        admin = AdminClient({"bootstrap.servers": bootstrap})
        admin.create_topics([NewTopic(topic, num_partitions=4, replication_factor=1)])[
            topic].result(10)
        _produce(bootstrap, topic, _events(n_events))
        single = kafka_single(bootstrap, topic, n_events, tmp)
        per_k = {k: kafka_sharded(bootstrap, topic, n_events, k, tmp) for k in (1, 2)}
        results["kafka"] = {"events": n_events, "single_per_s": single,
                            **{f"shards_{k}_per_s": v for k, v in per_k.items()}}
        print(f"{n_events:,} events, 4 partitions, train_every 10⁴: 1 shard {per_k[1]:,.0f}/s, "
              f"2 shards {per_k[2]:,.0f}/s, single trainer {single:,.0f}/s; ratio 2 shards / "
              f"single {per_k[2] / single:.2f}", flush=True)
        lines.append(f"| events/s, {n_events:,} events, 4-partition topic | {per_k[1]:,.0f} | "
                     f"{per_k[2]:,.0f} | {single:,.0f} | {per_k[2] / single:.2f}× |")
    model = cost_model(results["rounds"]) if not args.quick else {}
    results["cost_model"] = model
    for name, value in model.items():
        print(f"  cost model {name}: {value:.3g}")
    results["load_after"] = os.getloadavg()
    print(f"load average after {results['load_after'][0]:.2f}")
    ray.shutdown()
    if args.quick:
        return 0
    RESULTS.mkdir(exist_ok=True)
    (RESULTS / "sharded.json").write_text(json.dumps(results, indent=2) + "\n")
    (RESULTS / "sharded.md").write_text("\n".join(lines) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
