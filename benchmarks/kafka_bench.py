"""Kafka benchmark: topic → committed rounds, against raw confluent-kafka consumption.

    .venv/bin/python benchmarks/kafka_bench.py [--events 100000 200000] [--parse-only]

Starts a local Tansu broker and, for each topic size, produces JSON events (Abalone rows with
unique keys) and measures (1) raw confluent-kafka consume throughput and (2) renyiboost's
KafkaTrainer throughput from the topic to committed rounds in the SQLite store (the larger
the topic, the larger the active pool each round works on); then (3) latency from produce
to the publication of the first tree that used the record, with events arriving at a
steady rate and the default triggers (train_every = 100). The last topic size gives the
flat figures of ``results/kafka.json``; the others are under ``events_<n>``.

First, without a broker, :func:`parse_micro` times the event parser alone (µs per event of
``EventParser.parse_batch`` on batches of 1,000 Abalone events) against the per-message
reference path (``parse_each``), in the same run (``--parse-only`` stops there).
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Annotated, Any, NotRequired

import numpy as np
from confluent_kafka import Consumer, Producer

from renyiboost.connectors.events import EventParser
from renyiboost.connectors.kafka import KafkaSettings, KafkaTrainer, event_json
from renyiboost.connectors.local_broker import LocalBroker
from renyiboost.exceptions import ignore_comparison_warnings
from renyiboost.models.booster import SGBDTParams
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.sources import InMemorySource
from renyiboost.stream.store import SQLiteStore
from renyiboost.validation import RecordValidator

RESULTS = Path(__file__).parent / "results"


def _events(n: int) -> list[tuple[bytes, bytes]]:
    data = InMemorySource("abalone").data
    rows = [data.schema.decode_row(r) for r in data.X]
    out = []
    for i in range(n):
        key = f"k{i}"
        out.append((key.encode(), event_json(key, rows[i % len(rows)], float(data.y[i % len(rows)]))))
    return out


def _produce(bootstrap: str, topic: str, events: list[tuple[bytes, bytes]]) -> None:
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 20,
                         "batch.num.messages": 10000, "queue.buffering.max.messages": 1_000_000})
    for key, value in events:
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    assert producer.flush(120) == 0


def _engine(state: str, train_every: int) -> StreamEngine:
    schema = InMemorySource("abalone").schema
    params = SGBDTParams(task="regression", epsilon=1.0, rounds=20, depth=4,
                         sampling_rate=0.2, learning_rate=0.3)
    config = EngineConfig(public_schema=schema, params=params, train_every=train_every,
                          warmup=train_every)
    return StreamEngine(config, store=SQLiteStore(state, create=True), seed=0)


def _pydantic_array_adapter(schema: Any) -> Any:
    """pydantic's fastest form of the same typed check: a strict ``TypeAdapter`` of a list of
    events validating one JSON array a batch. It cannot tell which message failed (nor keep
    one message from reaching into the next), so it is pydantic's floor, not an option."""
    from pydantic import (
        AllowInfNan,
        ConfigDict,
        Strict,
        StrictBool,
        StrictInt,
        StrictStr,
        TypeAdapter,
    )
    from typing_extensions import TypedDict

    number = Annotated[float, Strict(), AllowInfNan(False)]
    category = StrictStr | StrictInt | StrictBool

    def typed(name: str, fields: dict[str, Any]) -> Any:
        typed_dict = TypedDict(name, fields)  # type: ignore[operator]
        typed_dict.__pydantic_config__ = ConfigDict(extra="forbid", cache_strings="keys")
        return typed_dict

    features = typed("EventFeatures", {
        name: NotRequired[(category if isinstance(spec, list) else number) | None]
        for name, spec in schema.features.items()})
    event = typed("Event", {"x": features, "y": Annotated[float, Strict()]})
    return TypeAdapter(list[event], config=ConfigDict(cache_strings="keys"))


def _best_of(paths: dict[str, Callable[[], Any]], repeats: int) -> dict[str, float]:
    """Best wall time of each path over ``repeats`` rounds, the paths interleaved in each
    round (so a change of machine load hits all of them alike)."""
    best = dict.fromkeys(paths, float("inf"))
    for _ in range(repeats):
        for name, run in paths.items():
            start = time.perf_counter()
            run()
            best[name] = min(best[name], time.perf_counter() - start)
    return best


def parse_micro(n_batches: int = 20, batch_size: int = 1000, repeats: int = 7) -> dict[str, float]:
    """µs per event of ``EventParser.parse_batch`` on batches of Abalone events (as
    :func:`_events` builds them, keys as message keys), broker-free, against the per-message
    reference path (:meth:`EventParser.parse_each`: pydantic-core's JSON and the record
    validator, on a twin parser), and the decoding step alone against pydantic's
    ``TypeAdapter.validate_json`` of each batch as one JSON array; all in this run. (The
    pydantic batch path msgspec replaced measured 2.55 µs an event beside our 1.24.)"""
    events = _events(n_batches * batch_size)
    batches = [([v for _, v in events[i:i + batch_size]], [k for k, _ in events[i:i + batch_size]])
               for i in range(0, len(events), batch_size)]
    arrays = [b"[" + b",".join(values) + b"]" for values, _ in batches]
    validator = RecordValidator(InMemorySource("abalone").schema, "regression")  # the engine's
    ours, twin = EventParser(validator), EventParser(RecordValidator(validator.schema,
                                                                      validator.task))
    adapter = _pydantic_array_adapter(validator.schema)
    decode = ours._decoder.decode  # type: ignore[union-attr]
    paths: dict[str, Callable[[], Any]] = {
        "ours": lambda: [ours.parse_batch(values, keys) for values, keys in batches],
        "msgspec_decode": lambda: [list(map(decode, values)) for values, _ in batches],
        "pydantic_validate_json": lambda: [adapter.validate_json(array) for array in arrays],
    }
    for (values, keys) in batches[:2]:  # the same answer before timing it
        new, reference = ours.parse_batch(values, keys), twin.parse_each(values, keys)
        assert new.keys == reference.keys and new.labels == reference.labels
        assert new.rows.tobytes() == reference.rows.tobytes()
    paths["per_message"] = lambda: [twin.parse_each(values, keys) for values, keys in batches]
    best = _best_of(paths, repeats)
    per_event = {name: seconds * 1e6 / len(events) for name, seconds in best.items()}
    result = {"parse_us_per_event": per_event["ours"],
              "parse_msgspec_decode_us_per_event": per_event["msgspec_decode"],
              "parse_pydantic_validate_json_us_per_event": per_event["pydantic_validate_json"]}
    print(f"parse_batch, {batch_size:,} Abalone events a batch, {len(events):,} events, best of "
          f"{repeats} (no broker):")
    print(f"  ours (msgspec){per_event['ours']:>30.2f} µs/event")
    result["parse_per_message_us_per_event"] = per_event["per_message"]
    print(f"  peer: parse per message (pydantic-core JSON + RecordValidator)"
          f"{per_event['per_message']:>8.2f} µs/event   ratio ours/peer "
          f"{per_event['ours'] / per_event['per_message']:.2f}")
    print(f"  decoding only: msgspec {per_event['msgspec_decode']:.2f} µs/event, pydantic "
          f"TypeAdapter.validate_json (one array a batch) "
          f"{per_event['pydantic_validate_json']:.2f} µs/event   ratio "
          f"{per_event['msgspec_decode'] / per_event['pydantic_validate_json']:.2f}")
    return result


def raw_consume(bootstrap: str, topic: str, n: int) -> float:
    consumer = Consumer({"bootstrap.servers": bootstrap, "group.id": f"raw-{uuid.uuid4().hex}",
                         "auto.offset.reset": "earliest", "session.timeout.ms": 6000,
                         "enable.auto.commit": False})
    consumer.subscribe([topic])
    got, start = 0, None
    while got < n:
        batch = consumer.consume(1000, 1.0)
        if batch and start is None:
            start = time.perf_counter()
        got += sum(1 for m in batch if not m.error())
    elapsed = time.perf_counter() - start  # type: ignore[operator]
    consumer.close()
    return n / elapsed


def trainer_throughput(bootstrap: str, topic: str, n: int, train_every: int, tmp: str) -> float:
    engine = _engine(f"{tmp}/throughput-{n}-{train_every}.db", train_every)
    trainer = KafkaTrainer(engine, KafkaSettings(
        bootstrap_servers=bootstrap, topics=[topic], group_id=f"t-{uuid.uuid4().hex}",
        model_topic=f"{topic}.models.{train_every}", batch_size=5000))
    while trainer.consumed == 0:
        trainer.poll_once()
    start = time.perf_counter()
    first = trainer.consumed
    while trainer.consumed < n:
        trainer.poll_once()
    engine.flush()
    elapsed = time.perf_counter() - start
    trainer.close()
    return (n - first) / elapsed


def latency(bootstrap: str, topic: str, rate: float, seconds: float, tmp: str) -> dict[str, float]:
    """Events at ``rate``/s; for each published update, publish time − produce time of the
    oldest record it was the first to include."""
    engine = _engine(f"{tmp}/latency.db", 100)
    _produce(bootstrap, topic, _events(1))  # creates the topic before the group subscribes
    trainer = KafkaTrainer(engine, KafkaSettings(
        bootstrap_servers=bootstrap, topics=[topic], group_id=f"l-{uuid.uuid4().hex}",
        model_topic=f"{topic}.models", batch_size=500, poll_timeout=0.05))
    produced: dict[str, float] = {}
    waiting: list[str] = []
    latencies: list[float] = []
    add = engine.add

    def timed_add(rows: np.ndarray, targets: list, keys: list, *args, **kwargs) -> None:
        waiting.extend(keys)
        add(rows, targets, keys, *args, **kwargs)

    engine.add = timed_add  # type: ignore[method-assign]
    publish = trainer.publish

    def timed_publish() -> None:
        pending = trainer._unpublished
        publish()
        if pending and waiting:
            now = time.time()
            merged = [k for k in waiting if engine.operator_budget_of(k).status != "pending"]
            latencies.extend(now - produced[k] for k in merged if k in produced)
            waiting[:] = [k for k in waiting if k not in set(merged)]

    trainer.publish = timed_publish  # type: ignore[method-assign]
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 1})
    events = _events(int(rate * seconds) + 1)[1:]
    start = time.time()
    for i, (key, value) in enumerate(events):
        while time.time() - start < i / rate:
            trainer.poll_once()
        produced[key.decode()] = time.time()
        producer.produce(topic, key=key, value=value)
        producer.poll(0)
    producer.flush(10)
    deadline = time.time() + 5
    while time.time() < deadline:
        trainer.poll_once()
    trainer.close()
    values = np.array(latencies)
    return {"latency_median_s": float(np.median(values)), "latency_p99_s": float(np.quantile(values, 0.99)),
            "latency_max_s": float(values.max()), "latency_records": int(values.size)}


def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--events", type=int, nargs="+", default=[100_000, 200_000],
                        help="topic sizes; the last one gives the headline figures")
    parser.add_argument("--parse-only", action="store_true",
                        help="only the broker-free parser micro-benchmark (nothing written)")
    parser.add_argument("--out", type=Path, default=RESULTS / "kafka.json",
                        help="where the figures go (default: %(default)s)")
    args = parser.parse_args()
    ignore_comparison_warnings()
    parse = parse_micro()
    if args.parse_only:
        return 0
    results: dict = {"events": args.events[-1], **parse}
    with tempfile.TemporaryDirectory() as tmp, LocalBroker(Path(tmp) / "tansu.log") as bootstrap:
        for n in args.events:
            row: dict[str, float] = {}
            topic = f"bench-{uuid.uuid4().hex[:6]}"
            _produce(bootstrap, topic, _events(n))
            row["raw_consume_per_s"] = raw_consume(bootstrap, topic, n)
            print(f"{n:,} events: raw confluent-kafka consume {row['raw_consume_per_s']:12,.0f} "
                  "events/s")
            for every in (100, 1000, 10_000):
                rate = trainer_throughput(bootstrap, topic, n, every, tmp)
                row[f"trainer_per_s_train_every_{every}"] = rate
                goal = "   (goal >= 90,000/s)" if every == 10_000 else ""
                print(f"{n:,} events: topic -> committed rounds, train_every={every:>6}: "
                      f"{rate:10,.0f} events/s   ratio to raw consume "
                      f"{rate / row['raw_consume_per_s']:.2f}{goal}")
            if n == args.events[-1]:
                results |= row  # the headline figures, flat as before
            else:
                results[f"events_{n}"] = row
        lat = latency(bootstrap, f"bench-{uuid.uuid4().hex[:6]}-lat", rate=2000, seconds=10,
                      tmp=tmp)
        results |= lat
        print(f"produce -> first published tree using the record (2,000 events/s, train_every=100): "
              f"median {lat['latency_median_s']:.3f} s, p99 {lat['latency_p99_s']:.3f} s, "
              f"max {lat['latency_max_s']:.3f} s (goal <= 2 s)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(results, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
