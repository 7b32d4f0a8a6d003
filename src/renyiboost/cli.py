"""The ``renyiboost`` command."""

from __future__ import annotations

import argparse
import sys


def main(argv: list[str] | None = None) -> int:
    """Dispatch ``renyiboost <command> …`` to the command's own parser."""
    argv = list(sys.argv[1:] if argv is None else argv)
    commands = {
        "demo": "replay a bundled data set under drift through the engine (the main job)",
        "reproduce": "reproduce the S-GBDT paper's batch results (Abalone, Adult)",
        "tune": "hyper-parameter search on training data only",
    }
    if not argv or argv[0] not in commands:
        parser = argparse.ArgumentParser(prog="renyiboost")
        parser.add_argument("command", choices=sorted(commands), help="; ".join(
            f"{name}: {text}" for name, text in commands.items()))
        parser.parse_args(argv[:1])
        return 2
    command, rest = argv[0], argv[1:]
    if command == "demo":
        from renyiboost.experiments.demo import main as run
    elif command == "reproduce":
        from renyiboost.experiments.reproduce import main as run
    else:
        from renyiboost.experiments.tune import main as run
    return run(rest)


if __name__ == "__main__":
    sys.exit(main())
