"""The ``renyiboost`` command (also ``python -m renyiboost``)."""

from __future__ import annotations

import argparse
import json
import logging
import sys

from renyiboost.exceptions import RenyiboostError

COMMANDS = {
    "demo": "replay a bundled data set under drift through the engine (the main job)",
    "train": "train continuously from a Kafka topic (or memory:DATASET) into a state file",
    "state": "create a state store (state init) or show its operator telemetry (state info)",
    "reshard": "move a deployment's key ledgers to another number of shards (nothing trains)",
    "replay": "produce a bundled data set under a drift scenario into a Kafka topic",
    "experiment": "a cached grid of prequential stream runs: tables and plots",
    "reproduce": "reproduce the S-GBDT paper's batch results (Abalone, Adult)",
    "tune": "hyper-parameter search on training data only (--private: accounted selection)",
    "serve": "an HTTP JSON predict endpoint that follows a model topic (public releases)",
}


def _serve(argv: list[str]) -> int:
    from renyiboost.connectors.serving import run_serve

    parser = argparse.ArgumentParser(prog="renyiboost serve", description=COMMANDS["serve"])
    parser.add_argument("--bootstrap", required=True, help="Kafka bootstrap servers host:port")
    parser.add_argument("--model-topic", required=True, help="the topic the trainer publishes "
                        "its releases to")
    parser.add_argument("--model-name", default="model",
                        help="the releases' message key (default: %(default)s)")
    parser.add_argument("--host", default="127.0.0.1", help="address to listen on "
                        "(default: %(default)s)")
    parser.add_argument("--port", type=int, default=8000, help="port (default: %(default)s)")
    args = parser.parse_args(argv)
    return run_serve(args.bootstrap, args.model_topic, args.model_name, args.host, args.port)


def _train(argv: list[str]) -> int:
    from renyiboost.connectors.service import load_config, run_train

    parser = argparse.ArgumentParser(prog="renyiboost train", description=COMMANDS["train"])
    parser.add_argument("--config", required=True, help="TOML config (see connectors.service)")
    parser.add_argument("--source", help="kafka://host:port/topic or memory:DATASET")
    parser.add_argument("--state", help="state store: a SQLite file or a "
                        "postgresql://…[?schema=name] URL (must exist, see --new-state)")
    parser.add_argument("--new-state", action="store_true",
                        help="create the state file first (refused if it exists): only for a "
                             "model that was never published")
    parser.add_argument("--model-topic")
    parser.add_argument("--model-name")
    parser.add_argument("--max-idle", type=float, help="stop after this many idle seconds")
    parser.add_argument("--json", action="store_true",
                        help="operator telemetry as JSON lines on standard output")
    _shard_options(parser)
    parser.add_argument("--ray", metavar="ADDRESS",
                        help="run the shards as Ray actors: local (a Ray instance on this "
                             "machine), auto (the running cluster) or ray://host:port; "
                             "without it the shards run in this process")
    args = parser.parse_args(argv)
    if args.ray is not None and args.shards is None:
        parser.error("--ray needs --shards")
    try:
        config = load_config(args.config, {"source": args.source, "state": args.state,
                                           "model_topic": args.model_topic,
                                           "model_name": args.model_name})
    except ValueError as error:
        parser.error(str(error))
    return run_train(config, max_idle=args.max_idle, as_json=args.json,
                     new_state=args.new_state, shards=args.shards, ray_address=args.ray)


def _shard_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--shards", type=int, metavar="N",
                        help="a key-sharded deployment of N shards: --state is then a "
                             "directory (one SQLite file per shard) or a postgresql:// URL "
                             "(one schema per shard)")


def _state(argv: list[str]) -> int:
    from renyiboost.connectors.service import engine_config, init_state, load_config
    from renyiboost.stream.engine import StreamEngine

    parser = argparse.ArgumentParser(prog="renyiboost state", description=COMMANDS["state"])
    parser.add_argument("action", choices=["init", "info"],
                        help="init: create the config's state store (refused if it exists); "
                             "info: print its operator telemetry as JSON (not for release)")
    parser.add_argument("--config", required=True, help="TOML config of `renyiboost train`")
    parser.add_argument("--state", help="state store, a SQLite file or a postgresql:// URL "
                        "(default: the config's)")
    _shard_options(parser)
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, {"state": args.state})
    except ValueError as error:
        parser.error(str(error))
    if args.action == "init":
        created = init_state(config, args.shards)
        for identity, location in created if isinstance(created, list) else [created]:
            print(f"created state store {location} (store id {identity.store_id})")
        return 0
    if args.shards is not None:
        from renyiboost.stream.sharded import ShardedEngine, shard_locations

        sharded = ShardedEngine(engine_config(config.model),
                                shard_locations(config.state, args.shards))
        try:
            print(json.dumps(sharded.operator_telemetry(), indent=1))
        finally:
            sharded.close()
        return 0
    engine = StreamEngine(engine_config(config.model), store=config.state,
                          seed=config.model.seed)
    try:
        print(json.dumps(engine.operator_telemetry().model_dump(), indent=1))
    finally:
        engine.close()
    return 0


def _reshard(argv: list[str]) -> int:
    from renyiboost.connectors.service import load_config, run_reshard

    parser = argparse.ArgumentParser(prog="renyiboost reshard", description=(
        f"{COMMANDS['reshard']}. Every key's spent budget, retirement, row and margin moves "
        "to the shard that owns it under the new partition map; the old stores are then "
        "refused for good. Stop the trainer first. Safe to run again after a crash."))
    parser.add_argument("--config", required=True, help="TOML config of `renyiboost train`")
    parser.add_argument("--state", help="the deployment's state (default: the config's)")
    parser.add_argument("--shards", type=int, metavar="N",
                        help="its number of shards now (omit for a single, unsharded store)")
    parser.add_argument("--to", type=int, required=True, metavar="M",
                        help="the number of shards after")
    parser.add_argument("--into", help="where the new shards' stores go (default: --state; "
                        "required when --state is a single SQLite file)")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, {"state": args.state})
    except ValueError as error:
        parser.error(str(error))
    return run_reshard(config, args.shards, args.to, args.into)


def _replay(argv: list[str]) -> int:
    from renyiboost.connectors.service import run_replay
    from renyiboost.stream.sources import SCENARIOS, STREAM_DATASETS

    parser = argparse.ArgumentParser(prog="renyiboost replay", description=COMMANDS["replay"])
    parser.add_argument("dataset", choices=STREAM_DATASETS)
    parser.add_argument("--scenario", default="iid", choices=SCENARIOS)
    parser.add_argument("--to", required=True, help="kafka://host:port/topic")
    parser.add_argument("--rate", type=float, default=0.0, help="events per second (0: max)")
    parser.add_argument("--limit", type=int)
    parser.add_argument("--seed", type=int, default=0, help="shuffle seed of the scenario")
    parser.add_argument("--connect-timeout", type=float, default=30.0,
                        help="seconds to wait for the cluster before giving up (default 30)")
    args = parser.parse_args(argv)
    return run_replay(args.dataset, args.scenario, args.to, args.rate, args.limit, args.seed,
                      args.connect_timeout)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``renyiboost <command> …``; a renyiboost error is one line and exit code 1."""
    argv = list(sys.argv[1:] if argv is None else argv)
    logging.basicConfig(level=logging.WARNING, stream=sys.stderr,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    logging.captureWarnings(True)  # schema and privacy warnings on the same channel
    try:
        return _dispatch(argv)
    except RenyiboostError as error:
        print(f"renyiboost: error: {error}", file=sys.stderr)
        return 1


def _dispatch(argv: list[str]) -> int:
    if not argv or argv[0] not in COMMANDS:
        parser = argparse.ArgumentParser(prog="renyiboost")
        parser.add_argument("command", choices=list(COMMANDS), help="; ".join(
            f"{name}: {text}" for name, text in COMMANDS.items()))
        parser.parse_args(argv[:1])
        return 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        return _train(rest)
    if command == "state":
        return _state(rest)
    if command == "replay":
        return _replay(rest)
    if command == "reshard":
        return _reshard(rest)
    if command == "serve":
        return _serve(rest)
    if command == "demo":
        from renyiboost.experiments.demo import main as run
    elif command == "experiment":
        from renyiboost.experiments.grid import main as run
    elif command == "reproduce":
        from renyiboost.experiments.reproduce import main as run
    elif "--private" in rest:
        from renyiboost.experiments.tune import private_main as run
    else:
        from renyiboost.experiments.tune import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
