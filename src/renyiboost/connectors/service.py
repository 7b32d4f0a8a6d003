"""The training service behind ``renyiboost train`` and the replay producer behind
``renyiboost replay``.

A TOML config (validated by pydantic; an unknown key is an error that names it)::

    source = "kafka://127.0.0.1:9092/events"     # or "memory:abalone"
    state = "state.db"
    model_topic = "renyiboost.models"
    model_name = "abalone"

    [kafka]                 # optional: group_id, batch_size, connect_timeout, extra
    group_id = "renyiboost"

    [model]                 # the estimator's keywords
    task = "regression"
    epsilon = 1.0
    delta = 1e-6
    target_bounds = [0, 30]
    train_every = 200

    [model.features]        # the public schema
    length = [0, 1]
    sex = ["M", "F", "I"]

Command-line flags override the file's top-level keys. The state file must exist: create
it once with ``renyiboost state init --config FILE`` (or ``train --new-state``).
"""

from __future__ import annotations

import contextlib
import json
import logging
import signal
import threading
import time
import tomllib
import warnings
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlparse

from pydantic import ConfigDict, Field, StrictInt, ValidationError, create_model

from renyiboost.accounting.inputs import Delta, OptionalEpsilon
from renyiboost.connectors.events import EventFormat
from renyiboost.connectors.kafka_settings import KafkaClientTable, Name, TopicName, topic_name
from renyiboost.exceptions import BrokerUnavailable, RenyiboostError, field_errors
from renyiboost.models.booster import SGBDTParams
from renyiboost.models.recalibration import RecalibrationPolicy
from renyiboost.schema import Category, FeatureSpec, PublicSchema
from renyiboost.settings import Settings
from renyiboost.stream.engine import EngineConfig, StreamEngine
from renyiboost.stream.postgres import without_password
from renyiboost.stream.store import (
    KEY_SOURCE_META,
    SQLiteStore,
    StoreIdentity,
    is_postgres_location,
    key_source_name,
    pin_meta,
    store_at,
)

log = logging.getLogger("renyiboost.train")

#: The learner's fields a ``[model]`` table may set; each left out takes the default
#: policy's value (:mod:`renyiboost.models.defaults`), not a field default of its own.
_LEARNER_FIELDS: dict[str, Any] = {
    name: (field.annotation | None, None)
    for name, field in SGBDTParams.model_fields.items()
    if name not in {"task", "epsilon", "delta"}
}
_TRIGGER_FIELDS: dict[str, Any] = {
    name: (field.annotation | None, None)
    for name, field in EngineConfig.model_fields.items()
    if name not in {"public_schema", "params"}
}
#: ``recalibration = false`` switches the answers' recalibration off, and
#: ``max_train_every_beyond_end = false`` a hinted stream's own schedule beyond its end (TOML
#: has no null, and a field left out takes the policy's).
_FALSE_IS_NONE = ("recalibration", "max_train_every_beyond_end")
_TRIGGER_FIELDS["recalibration"] = (RecalibrationPolicy | Literal[False] | None, None)
_TRIGGER_FIELDS["max_train_every_beyond_end"] = (  # true is not 1 here
    StrictInt | Literal[False] | None, None)


class _ModelTable(Settings):
    model_config = ConfigDict(extra="forbid")

    task: str = "regression"
    epsilon: OptionalEpsilon = Field(1.0, description="target ε: a finite number > 0")
    delta: Delta = Field(1e-6, description="target δ: far below 1/n, at most 0.01")
    expected_records: int | None = Field(None, ge=1, description="public size hint")
    features: dict[str, FeatureSpec]
    target_bounds: tuple[float, float] | None = None
    labels: list[Category] | None = Field(
        None, description="a classifier's public label set (strings, or three classes or "
        "more); left out, the labels are 0/1 or true/false. The table had no such key, so a "
        "config could not train what the engine and the event parser take (review U)")
    seed: int | None = None


ModelConfig = create_model(  # the [model] table: schema, learner and triggers, all optional
    "ModelConfig", __base__=_ModelTable, **_LEARNER_FIELDS, **_TRIGGER_FIELDS)


def engine_config(model: Any) -> EngineConfig:
    """The engine's configuration of a ``[model]`` table: the default policy with the
    table's explicit values on top."""
    try:
        schema = PublicSchema(features=model.features, target_bounds=model.target_bounds,
                              labels=model.labels)
    except ValidationError as error:
        raise ValueError(field_errors(error, "model.")) from None
    explicit = {name: value for name, value in model.model_dump(
        include=set(_LEARNER_FIELDS) | set(_TRIGGER_FIELDS)).items() if value is not None}
    for name in _FALSE_IS_NONE:
        if explicit.get(name) is False:
            explicit[name] = None
    try:
        return EngineConfig.from_defaults(schema, model.task, model.epsilon, model.delta,
                                          model.expected_records, **explicit)
    except ValidationError as error:  # named as the file names them (it said "depth: ...")
        raise ValueError(field_errors(error, "model.")) from None
    except ValueError as error:  # a check outside pydantic (the trigger schedule's, say)
        raise ValueError(f"model: {error}") from None


class ServiceConfig(Settings):
    """A whole ``renyiboost train`` config file."""

    model_config = ConfigDict(extra="forbid")

    source: str
    state: str = "state.db"
    model_topic: TopicName = "renyiboost.models"
    model_name: Name = "model"
    kafka: KafkaClientTable = Field(default_factory=KafkaClientTable)
    events: EventFormat = Field(default_factory=EventFormat)
    model: ModelConfig  # type: ignore[valid-type]


def load_config(path: str | Path, overrides: dict[str, Any] | None = None) -> ServiceConfig:
    """Read and validate a TOML config; raises ``ValueError`` naming the file and what is
    wrong (a TOML syntax error and a file that is not UTF-8 once did not name the file)."""
    try:
        data = tomllib.loads(Path(path).read_text(encoding="utf-8"))
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as error:
        raise ValueError(f"{path}: not a valid TOML file: {error}") from None
    data.update({k: v for k, v in (overrides or {}).items() if v is not None})
    try:
        config = ServiceConfig(**data)
    except ValidationError as error:
        raise ValueError(f"{path}: {field_errors(error)}") from None
    try:  # what the engine refuses is the file's error too (it once came without the path)
        with warnings.catch_warnings():  # the commands' own engine_config warns, once
            warnings.simplefilter("ignore")
            engine_config(config.model)
    except ValueError as error:
        raise ValueError(f"{path}: {error}") from None
    return config


def parse_kafka_url(url: str) -> tuple[str, str]:
    """``kafka://host:port[,host:port…]/topic`` → (bootstrap servers, topic).

    Nothing else is read from the URL, so nothing else may be in it: a query
    (``?security.protocol=SSL``) was dropped without a word, and a user and password were
    passed on as part of a broker's address and logged (review U #5). Security settings go
    in the ``[kafka]`` table's ``extra``.

    >>> parse_kafka_url("kafka://b1:9092,b2:9092/events")
    ('b1:9092,b2:9092', 'events')
    """
    parts = urlparse(url)
    if parts.scheme != "kafka" or not parts.netloc or not parts.path.strip("/"):
        raise ValueError(f"expected kafka://host:port/topic, got {url!r}")
    if "@" in parts.netloc or parts.params or parts.query or parts.fragment:
        shown = url.split("://", 1)[0] + "://" + parts.netloc.rpartition("@")[2] + parts.path
        raise ValueError(f"a Kafka source URL is kafka://host:port/topic and nothing more, got "
                         f"{shown!r} with a user, a query or a fragment: set security and "
                         "other client settings in the [kafka] table's extra")
    return parts.netloc, topic_name(parts.path.strip("/"))


def init_state(config: ServiceConfig, shards: int | None = None
               ) -> tuple[StoreIdentity, str] | list[tuple[StoreIdentity, str]]:
    """Create the config's state store (refused if one is there) and pin its configuration
    and calibration: ``renyiboost state init``. Returns its identity and where it is (a
    URL without its password); with ``shards``, those of every shard's store
    (:func:`~renyiboost.stream.sharded.shard_locations`). The config's source is judged
    first, as ``train`` judges it: a store made for a config ``train`` then refused (a
    ``memory:`` data set whose features are not the config's) could never be used."""
    engine_cfg = engine_config(config.model)  # a bad [model] table leaves no store behind
    _source_of(config, engine_cfg)
    if shards is not None:
        return _init_shard_states(config, shards)
    store = store_at(config.state, create=True)
    engine = StreamEngine(engine_cfg, store=store, seed=config.model.seed)
    identity = engine.store.identity
    engine.close()
    return identity, store.location


def _init_shard_states(config: ServiceConfig, shards: int) -> list[tuple[StoreIdentity, str]]:
    from renyiboost.stream.sharded import create_shard_stores, shard_locations

    engine_cfg = engine_config(config.model)  # before anything is created
    locations = shard_locations(config.state, shards)
    _make_directory(config.state)
    identities = create_shard_stores(engine_cfg, locations)
    return [(identity, without_password(location))
            for identity, location in zip(identities, locations, strict=True)]


def _make_directory(state: str) -> None:
    """The directory of a deployment's SQLite shard files (nothing for a PostgreSQL URL)."""
    if not is_postgres_location(state):
        Path(state).mkdir(parents=True, exist_ok=True)


def run_reshard(config: ServiceConfig, shards: int | None, to: int,
                into: str | None = None) -> int:
    """``renyiboost reshard``: move the ledgers of ``config.state`` (``shards`` shards, or one
    unsharded store) into ``to`` shards under ``into`` (default: the same place); see
    :mod:`renyiboost.stream.reshard`. Prints the new stores and what they hold (operator
    telemetry)."""
    from renyiboost.stream.reshard import reshard
    from renyiboost.stream.sharded import shard_locations

    if to < 1 or (shards is not None and shards < 1):
        raise RenyiboostError("the number of shards must be at least 1")
    sources = [config.state] if shards is None else shard_locations(config.state, shards,
                                                                    alone=False)
    target = into or config.state
    if shards is None and into is None:
        raise RenyiboostError("resharding a single store needs --into: a directory or "
                              "postgresql:// URL for the new shards' stores")
    if shards == to and target == config.state:
        raise RenyiboostError(f"the deployment already has {to} shards there")
    engine_cfg = engine_config(config.model)  # before anything is created
    _make_directory(target)
    report = reshard(engine_cfg, sources, shard_locations(target, to, alone=False))
    what = "finished an interrupted reshard into" if report.finished_only else "resharded into"
    print(f"{what} {to} shards (operator telemetry, not for release):")
    for j, location in enumerate(report.into):
        counts = (f": {report.n_active[j]} active and {report.n_retired[j]} retired keys"
                  if report.n_active else "")
        print(f"  shard {j}: {without_password(location)}{counts}")
    if not report.finished_only:
        print(f"  {report.moved} keys changed shard")
    if report.partition_map is not None:
        print(f"  partition map: {report.partition_map}")
    print(f"train it with --shards {to}" + (f" --state {into}" if into else ""))
    return 0


def kafka_settings(config: ServiceConfig) -> Any:
    """The Kafka settings of a config whose source is a ``kafka://`` URL."""
    from renyiboost.connectors.kafka import KafkaSettings

    bootstrap, topic = parse_kafka_url(config.source)
    return KafkaSettings(
        bootstrap_servers=bootstrap, topics=[topic], group_id=config.kafka.group_id,
        model_topic=config.model_topic, model_name=config.model_name,
        batch_size=config.kafka.batch_size, connect_timeout=config.kafka.connect_timeout,
        dlq_timeout=config.kafka.dlq_timeout, partitioner=config.kafka.partitioner,
        extra=config.kafka.extra,
    )


def run_train(config: ServiceConfig, max_idle: float | None = None, as_json: bool = False,
              new_state: bool = False, shards: int | None = None,
              ray_address: str | None = None) -> int:
    """Train from the configured source until stopped (SIGINT/SIGTERM) or idle.

    The state store (a SQLite path or a ``postgresql://`` URL) must exist unless
    ``new_state`` (then it must not): see :func:`~renyiboost.stream.store.store_at`. With
    ``shards``, the deployment is sharded (:mod:`renyiboost.stream.sharded`): one store per
    shard under ``state``, each shard reading its own partitions of the topic, in this
    process or, with ``ray_address`` (``local``, ``auto`` or ``ray://host:port``), as Ray
    actors.
    """
    if shards is not None:
        return _run_sharded(config, shards, ray_address, max_idle, as_json, new_state)
    from renyiboost.connectors.kafka import KafkaTrainer

    engine_cfg = engine_config(config.model)  # a bad [model] table leaves no store behind
    # so does a bad source: a store created before it failed refused the corrected command
    # ("already exists")
    memory, settings = _source_of(config, engine_cfg)
    store = store_at(config.state, create=new_state)
    engine = StreamEngine(engine_cfg, store=store, seed=config.model.seed)
    log.info("training from %s into %s (store %s, epoch %s) from release version %d",
             config.source, without_password(str(config.state)),
             engine.store.identity.store_id, engine.store.identity.epoch,
             engine.release_version)
    try:
        if memory is not None:
            _note_unused_kafka_settings(config)
            return _train_from_memory(engine, memory, config.source, as_json)
        try:
            trainer = KafkaTrainer(engine, settings, config.events)
        except BaseException:
            if new_state:
                _discard_unused(engine)
            raise
        # the records read but not yet in a round: committed with their offsets
        _run_until_stopped(trainer, max_idle, as_json, then=engine.flush)
        _print_telemetry(trainer.telemetry(), as_json)
        log.info("stopped at release version %d; pending records committed with their "
                 "offsets", engine.release_version)
        return 0
    finally:
        engine.close()


def _note_unused_kafka_settings(config: ServiceConfig) -> None:
    """Say which of the file's settings a ``memory:`` source does not read: it publishes
    nothing and reads no topic, and ``model_topic`` or ``[kafka]`` set for it were passed
    over without a word, the command exiting 0 (review C, 29 November). The example file
    sets them for the Kafka run it also shows, so this is a line of the log, not an error."""
    unused = sorted(config.model_fields_set & {"model_topic", "model_name", "kafka", "events"})
    if unused:
        log.info("%s replays a bundled data set in this process and publishes nothing: the "
                 "config's %s are for a Kafka source and not used", config.source,
                 ", ".join(unused))


def _discard_unused(engine: StreamEngine) -> None:
    """Remove the SQLite store that ``--new-state`` created for a start that then failed
    (the broker away, a check refused): it holds no key and no release, so no ledger is
    lost, and the same command run again was refused ("already exists") while a store the
    operator never used stayed behind (review C, 29 November). A PostgreSQL schema stays,
    with a word: run the command again without ``--new-state``."""
    store = engine.store
    if engine.positions or engine.release_version:
        return
    engine.close()
    if isinstance(store, SQLiteStore):
        store._remove()
        log.info("removed the unused state store %s that this start created", store.location)
    else:
        log.warning("the state store %s was created and holds nothing: run the command again "
                    "without --new-state", store.location)


@contextlib.contextmanager
def _stopped_by_signals(stop: Callable[[int], None]) -> Iterator[None]:
    """SIGINT and SIGTERM call ``stop(signal number)`` inside, where a run finishes its
    batch, commits and closes; their handlers are given back after. A Kafka run left them
    pointing at its closed trainer, so a later Ctrl-C in the same process was swallowed
    (review U #3), and a sharded replay had none, so SIGTERM killed it mid-commit (U #2)."""
    if threading.current_thread() is not threading.main_thread():
        yield  # only the main thread takes signals: a run in another thread has none to set
        return  # (it failed there: review D7 #5)
    handlers = {sig: signal.signal(sig, lambda number, _: stop(number))
                for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    finally:
        for sig, handler in handlers.items():
            signal.signal(sig, handler)


def _run_until_stopped(trainer: Any, max_idle: float | None, as_json: bool,
                       then: Callable[[], Any] = lambda: None) -> None:
    """Run a trainer until SIGINT/SIGTERM or ``max_idle``, printing its operator telemetry
    every two seconds, then call ``then`` (the final commit) under the same handlers: a
    second signal does not cut it short."""
    last = [0.0]

    def show(t: Any) -> None:
        now = time.monotonic()
        if now - last[0] < 2.0:
            return
        last[0] = now
        _print_telemetry(t.telemetry(), as_json)

    with _stopped_by_signals(lambda _: trainer.stop()):
        trainer.run(max_idle=max_idle, on_poll=show)
        then()


def _run_sharded(config: ServiceConfig, shards: int, ray_address: str | None,
                 max_idle: float | None, as_json: bool, new_state: bool) -> int:
    from renyiboost.stream.sharded import LocalShards, ShardedEngine, shard_locations

    if shards < 1:
        raise ValueError("--shards must be at least 1")
    engine_cfg, seed = engine_config(config.model), config.model.seed  # before any store
    data, settings = _source_of(config, engine_cfg)  # a bad source leaves no store behind
    source = None
    memory = data is not None
    if not memory:  # the broker first: one away left new stores behind (review C)
        from renyiboost.connectors.kafka import KafkaTrainer, partition_map_for

        source = KafkaTrainer.for_shard(settings, config.events,
                                        partition_map_for(settings, shards))
    if new_state:
        _init_shard_states(config, shards)
    locations = shard_locations(config.state, shards)
    if ray_address is not None:
        try:
            from renyiboost.stream.ray_shards import RayShards
        except ImportError:
            raise RenyiboostError("--ray needs Ray: pip install 'renyiboost[ray]'") from None
        group: Any = RayShards(engine_cfg, locations, seed=seed, source=source,
                               address=ray_address)
    else:
        group = LocalShards.open(engine_cfg, locations, seed, source)
    engine = ShardedEngine(engine_cfg, group, seed=seed)
    try:
        if memory:
            if engine.positions:
                # each shard commits its own records, so the stores' positions do not say
                # which records of the replay they hold (a crash between two shards' commits,
                # or a store Kafka fed); feeding it all again counted each record twice
                raise ValueError(
                    f"these shard stores already hold {engine.positions:,} stream positions: "
                    f"a {config.source} replay over shards cannot continue them exactly. "
                    "Create new stores at another location (--state … --new-state), or "
                    "train these from Kafka")
            _note_unused_kafka_settings(config)
            stopping: list[int] = []
            consumed = 0
            with _stopped_by_signals(stopping.append):
                for batch in data:
                    engine.add(batch.X, batch.y, batch.keys)
                    consumed += len(batch.y)
                    if stopping:
                        log.warning("interrupted (signal %d) after %d records: committing "
                                    "them; a replay over shards cannot be continued, so "
                                    "these stores take no more of it", stopping[0], consumed)
                        break
                engine.flush()
            _print_telemetry({**engine.operator_telemetry(), "consumed": consumed}, as_json)
            return 0
        from renyiboost.connectors.kafka import ShardedKafkaTrainer

        trainer = ShardedKafkaTrainer(engine, settings)
        _run_until_stopped(trainer, max_idle, as_json)
        _print_telemetry(trainer.telemetry(), as_json)
        return 0
    finally:
        engine.close()


def _source_of(config: ServiceConfig, engine_cfg: EngineConfig) -> tuple[Any, Any]:
    """The config's source, judged before any store is created: the bundled data set of a
    ``memory:`` source (checked against the model's schema) and no Kafka settings, or
    ``None`` and the settings of a ``kafka://`` URL (parsed; no broker is reached)."""
    memory = _memory_source(config.source, engine_cfg)
    return memory, None if memory is not None else kafka_settings(config)


def _memory_source(source: str, engine_cfg: EngineConfig) -> Any:
    """The bundled data set of a ``memory:NAME`` source (``None`` for another source), loaded
    before any store is created. Its rows come encoded by the data set's own schema, so the
    config's features must be its features, in its order, with its categories in its order,
    and the task its task: a misspelt name trained on, and categories in another order
    published a schema that encoded ``"M"`` as another category than the trees had."""
    if not source.startswith("memory:"):
        return None
    from renyiboost.stream.sources import InMemorySource

    data = InMemorySource(source.removeprefix("memory:"), batch_size=1000)

    def encoding(schema: PublicSchema) -> list[tuple[str, Any]]:
        """What a row's columns mean: each feature's name and categories (or numeric)."""
        return [(name, list(spec) if isinstance(spec, list) else "numeric")
                for name, spec in schema.features.items()]

    if encoding(engine_cfg.public_schema) != (bundled := encoding(data.schema)):
        raise ValueError(
            f"[model.features] must be the features of {source}, in its order, its "
            f"categories in its order (the rows come encoded by them): {source} has "
            + ", ".join(f"{name} = {spec}" for name, spec in bundled))
    if engine_cfg.params.task != data.data.task:
        raise ValueError(f"{source} is a {data.data.task} data set; [model] task is "
                         f"{engine_cfg.params.task!r}")
    return data


def _train_from_memory(engine: StreamEngine, source: Any, name: str, as_json: bool) -> int:
    """Train on the records of ``source`` (the config's ``name``) the store has not
    committed yet (a second run on the same store continues the stream; it once fed every
    record again). The replay's keys are its row numbers, pinned as the store's key
    source: a store Kafka fed took a forgotten ``--source`` as a replay into the production
    ledgers (rows ``"0"``, ``"1"``, … charged to the people of those keys), and a Kafka
    start on a replay's store is refused the same way."""
    from renyiboost.stream.sources import committed_records

    rows = {"memory_rows": name}
    pin_meta(engine.store, KEY_SOURCE_META, rows, lambda recorded: (
        f"this store's keys came from {key_source_name(recorded)}, and {name} keys its "
        f"records by {key_source_name(rows)}: they would be charged to the ledgers of other "
        "records. Pass the store's own source (--source kafka://…), or replay into a new "
        "store (--state … --new-state)"))
    done = committed_records(source, engine.offsets)
    stopping: list[int] = []  # SIGINT/SIGTERM finish the batch, commit and close, as with
    consumed = 0  # Kafka (SIGTERM killed it: review C)
    with _stopped_by_signals(stopping.append):
        for batch in source.batches(after=done):
            engine.add(batch.X, batch.y, batch.keys, batch.positions)
            consumed += len(batch.y)
            if stopping:
                log.info("interrupted (signal %d): committing the records read", stopping[0])
                break
        engine.flush()  # under the handlers: a second signal does not cut the commit short
    _print_telemetry({"channel": "operator-telemetry", "consumed": consumed,
                      "engine": engine.operator_telemetry().model_dump()}, as_json)
    return 0


def _print_telemetry(status: dict[str, Any], as_json: bool, prefix: str = "") -> None:
    """Operator telemetry to standard output (exact counts: keep this channel private)."""
    if as_json:
        print(json.dumps(status), flush=True)
        return
    if "shards" in status:  # a sharded deployment: the coordinator, then one line a shard
        print(f"[operator telemetry] consumed {status['consumed']:>9,}  version "
              f"{status['release_version']:>5}  positions {status['positions']:>9,}  "
              f"aborted rounds {status['aborted_rounds']}", flush=True)
        for k, shard in enumerate(status["shards"]):  # a shard's positions since its start
            _print_telemetry({"positions": shard["engine"]["positions"], **shard}, False,
                             f"  shard {k}: ")
        return
    engine = status["engine"]
    counted = "consumed" if "consumed" in status else "positions"
    print(f"{prefix or '[operator telemetry] '}{counted} {status[counted]:>9,}  "
          f"version {engine['release_version']:>5}  active {engine['n_active']:>8,}  "
          f"retired {engine['n_retired']:>8,}  dropped {engine['n_dropped']:>6,}  "
          f"dead letters {status.get('dead_letters', {})}", flush=True)


def run_replay(dataset: str, scenario: str, to: str, rate: float, limit: int | None,
               seed: int = 0, connect_timeout: float = 30.0,
               client: Mapping[str, str] | None = None) -> int:
    """Produce a bundled data set under a drift scenario into a topic, at ``rate`` events/s
    (``client``: more librdkafka settings, e.g. a secured cluster's).

    Each record's key is the Kafka message key (the default identity of ``train``).
    """
    from confluent_kafka import KafkaException, Producer

    from renyiboost.connectors.kafka import event_json, log, produce_waiting
    from renyiboost.stream.sources import InMemorySource

    bootstrap, topic = parse_kafka_url(to)
    source = InMemorySource(dataset, scenario=scenario, batch_size=500, limit=limit, seed=seed)
    producer = Producer({"bootstrap.servers": bootstrap, "linger.ms": 5, "logger": log,
                         **(client or {}), "enable.idempotence": True})
    try:
        producer.list_topics(timeout=connect_timeout)
    except KafkaException as error:
        raise BrokerUnavailable(f"no Kafka broker at {bootstrap} answered within "
                                f"{connect_timeout:g} s ({error})") from None
    start, sent = time.monotonic(), 0
    classification = source.data.task == "classification"
    for batch in source:
        for row, y, key in zip(batch.X, batch.y, batch.keys, strict=True):
            label = bool(y) if classification else float(y)
            produce_waiting(producer, connect_timeout, topic, key=key.encode(),
                            value=event_json(key, source.schema.decode_row(row), label))
            sent += 1
            if rate > 0 and sent % 100 == 0:
                delay = sent / rate - (time.monotonic() - start)
                if delay > 0:
                    time.sleep(delay)
            producer.poll(0)
    remaining = producer.flush(connect_timeout)
    if remaining:
        raise BrokerUnavailable(f"{remaining} of {sent} events were not delivered to {bootstrap} "
                                f"within {connect_timeout:g} s")
    print(f"produced {sent} events of {dataset} ({scenario}) to {topic} "
          f"in {time.monotonic() - start:.1f} s")
    return 0
