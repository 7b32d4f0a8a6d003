"""The ``renyiboost`` command (also ``python -m renyiboost``)."""

from __future__ import annotations

import argparse
import sys

COMMANDS = {
    "demo": "replay a bundled data set under drift through the engine (the main job)",
    "train": "train continuously from a Kafka topic (or memory:DATASET) into a state file",
    "replay": "produce a bundled data set under a drift scenario into a Kafka topic",
    "experiment": "a cached grid of prequential stream runs: tables and plots",
    "reproduce": "reproduce the S-GBDT paper's batch results (Abalone, Adult)",
    "tune": "hyper-parameter search on training data only",
}


def _train(argv: list[str]) -> int:
    from renyiboost.connectors.service import load_config, run_train

    parser = argparse.ArgumentParser(prog="renyiboost train", description=COMMANDS["train"])
    parser.add_argument("--config", required=True, help="TOML config (see connectors.service)")
    parser.add_argument("--source", help="kafka://host:port/topic or memory:DATASET")
    parser.add_argument("--state", help="SQLite state file")
    parser.add_argument("--model-topic")
    parser.add_argument("--model-name")
    parser.add_argument("--max-idle", type=float, help="stop after this many idle seconds")
    parser.add_argument("--json", action="store_true", help="machine-readable status lines")
    args = parser.parse_args(argv)
    try:
        config = load_config(args.config, {"source": args.source, "state": args.state,
                                           "model_topic": args.model_topic,
                                           "model_name": args.model_name})
    except ValueError as error:
        parser.error(str(error))
    return run_train(config, max_idle=args.max_idle, as_json=args.json)


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
    args = parser.parse_args(argv)
    return run_replay(args.dataset, args.scenario, args.to, args.rate, args.limit, args.seed)


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``renyiboost <command> …`` to the command's own parser."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] not in COMMANDS:
        parser = argparse.ArgumentParser(prog="renyiboost")
        parser.add_argument("command", choices=list(COMMANDS), help="; ".join(
            f"{name}: {text}" for name, text in COMMANDS.items()))
        parser.parse_args(argv[:1])
        return 2
    command, rest = argv[0], argv[1:]
    if command == "train":
        return _train(rest)
    if command == "replay":
        return _replay(rest)
    if command == "demo":
        from renyiboost.experiments.demo import main as run
    elif command == "experiment":
        from renyiboost.experiments.grid import main as run
    elif command == "reproduce":
        from renyiboost.experiments.reproduce import main as run
    else:
        from renyiboost.experiments.tune import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
