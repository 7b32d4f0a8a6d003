"""The ``renyiboost`` command (also ``python -m renyiboost``), on click.

Every option has help text and shows its default (``renyiboost COMMAND --help``);
``renyiboost --version`` prints the version. An error is one line on stderr and exit code 1
(a usage error: exit code 2); ``--debug`` shows the traceback instead. A missing optional
package names the extra that installs it. ``--log-level`` sets the level of renyiboost's
log records (timestamps, levels and logger names on stderr; librdkafka's lines go through
the same ``logging`` channel, and so do Python warnings). Lists take comma-separated values
(``--datasets abalone,elec2``).

The commands call plain functions of the modules that do the work (``run_demo``,
``run_experiment``, ``run_train``, …); all argument parsing is here.
"""

from __future__ import annotations

import json
import logging
import math
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import click

LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"
#: The extra that installs a missing optional module.
EXTRAS = {"interpret": "experiments", "diffprivlib": "experiments", "xgboost": "experiments",
          "matplotlib": "plot", "fastapi": "serve", "uvicorn": "serve", "onnx": "onnx",
          "psycopg": "postgres", "ray": "ray"}
CONTEXT = {"help_option_names": ["-h", "--help"], "show_default": True, "max_content_width": 100}


#: The files a SQLite state store keeps beside its own (its ``.epoch`` record of commits,
#: which refuses an older copy; its lock; SQLite's journal): a report written over one
#: (``tune --json state.db.epoch``) let an older copy of the store open with its keys'
#: budgets back (review C, 29 November).
STORE_FILE_SUFFIXES = (".epoch", ".lock", "-wal", "-shm", "-journal")


class OutputFile(click.ParamType):
    """A file a command writes after its run, checked before the run (which may spend
    budget, or take an hour): not a directory, not a SQLite database (a state store's keys'
    budgets would be overwritten by a report), and writable, its folder created. A failed
    write once came after the run had committed its rounds, with exit code 1."""

    name = "file"

    def convert(self, value: Any, param: click.Parameter | None,
                ctx: click.Context | None) -> str:
        from renyiboost.stream.store import is_sqlite_database

        path = Path(value)
        if path.is_dir():
            self.fail(f"{value} is a directory; give a file path", param, ctx)
        if path.is_file() and is_sqlite_database(path):
            self.fail(f"{value} is a SQLite database (a state store?); a report never "
                      "replaces one: give another path", param, ctx)
        real = os.path.realpath(value)  # a link to one too, as the store resolves its own
        beside = next((suffix for suffix in STORE_FILE_SUFFIXES
                       if real.endswith(suffix) and is_sqlite_database(
                           Path(real.removesuffix(suffix)))), None)
        if beside is not None:  # a report over the .epoch record turned off the check
            self.fail(f"{value} is the {beside} file of the state store "  # of old copies
                      f"{real.removesuffix(beside)}; a report never replaces one: give "
                      "another path", param, ctx)
        if os.path.lexists(path):  # a file, a device (/dev/stdout), a pipe: never touched
            if not os.access(path, os.W_OK):
                self.fail(f"{value} cannot be written (permission denied)", param, ctx)
            return str(path)
        try:  # a new file: created and removed again, only if this call created it
            path.parent.mkdir(parents=True, exist_ok=True)
            os.close(os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL))
            path.unlink()
        except OSError as error:
            self.fail(f"{value} cannot be written ({error.strerror or error})", param, ctx)
        return str(path)


class LazyChoice(click.Choice):
    """A choice whose values are loaded when first needed (keeps ``--version`` fast)."""

    def __init__(self, load: Callable[[], Sequence[str]]) -> None:
        self._load = load
        self.case_sensitive = True

    @property
    def choices(self) -> tuple[str, ...]:  # type: ignore[override]
        return tuple(self._load())


class CommaList(click.ParamType):
    """A comma-separated list (``a,b,c``), each item of ``item`` type, optionally checked
    against ``choices``."""

    name = "LIST"

    def __init__(self, item: type = str, choices: Callable[[], Sequence[str]] | None = None
                 ) -> None:
        self.item, self.load = item, choices

    def convert(self, value: Any, param: Any, ctx: Any) -> list[Any]:
        if isinstance(value, list):
            return value
        items = [part.strip() for part in str(value).split(",")]
        if not any(items):  # "," ran a grid of no private cell, or none at all (review L #3)
            self.fail(f"{value!r} names nothing; give one item or more", param, ctx)
        if not all(items):  # "0.5,,1": an item left out by mistake (review D6)
            self.fail(f"{value!r} has an empty item; separate the items by single commas",
                      param, ctx)
        try:
            out = [self.item(part) for part in items]
        except ValueError:
            self.fail(f"{value!r} is not a comma-separated list of {self.item.__name__}",
                      param, ctx)
        if len(set(out)) < len(out):  # the same cell twice, counted as two repeats (#4)
            twice = sorted({item for item in out if out.count(item) > 1}, key=str)
            self.fail(f"{twice} named more than once; name each once", param, ctx)
        if self.load is not None:
            unknown = sorted(set(out) - set(self.load()))
            if unknown:
                self.fail(f"unknown {unknown}; choose from {', '.join(self.load())}", param, ctx)
        return out


def _epsilon(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """An ``--epsilon``: a finite number > 0 (click's ``FloatRange`` lets inf and nan
    through), checked by the policy's own rule before anything runs."""
    from renyiboost.accounting.inputs import check_epsilon

    try:
        return None if value is None else check_epsilon(value, allow_none=False)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _delta(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A ``--delta``: a finite number in (0, 0.01], far below 1/n (the policy's rule)."""
    from renyiboost.accounting.inputs import check_delta

    try:
        return None if value is None else check_delta(value)
    except ValueError as error:
        raise click.BadParameter(str(error), ctx, param) from None


def _finite(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A number of seconds or events per second: finite (``FloatRange`` lets inf and nan
    through; ``--max-idle nan`` never stopped)."""
    if value is not None and not math.isfinite(value):
        raise click.BadParameter(f"must be a finite number, got {value}", ctx, param)
    return value


def _epsilons(ctx: click.Context, param: click.Parameter,
              value: list[float] | None) -> list[float] | None:
    """An ``--epsilons`` list: each ε a finite number > 0 (``0,-1`` once failed only when
    the grid ran, with exit code 1; ``inf`` was offered as "non-private" and then refused
    by the grid: review L #5; a grid's non-private cells are its non-private methods)."""
    for epsilon in value or []:
        if not (epsilon > 0 and math.isfinite(epsilon)):  # NaN fails too
            raise click.BadParameter(f"every ε must be a finite number > 0, got {epsilon}",
                                     ctx, param)
    return value


def _mean_runs(ctx: click.Context, param: click.Parameter, value: float | None) -> float | None:
    """A private selection's expected number of runs: 1 to ``MAX_MEAN_RUNS``."""
    from renyiboost.models.tuning import MAX_MEAN_RUNS

    if value is not None and not (math.isfinite(value) and 1 <= value <= MAX_MEAN_RUNS):
        raise click.BadParameter(f"must be a number from 1 to {MAX_MEAN_RUNS} (the expected "
                                 f"fits), got {value}", ctx, param)
    return value


def _not_blank(ctx: click.Context, param: click.Parameter, value: str | None) -> str | None:
    """A name that must say something (``serve --bootstrap ''`` waited without a reason);
    ``None`` is an option left to the config."""
    if value is not None and not value.strip():
        raise click.BadParameter("must not be empty", ctx, param)
    return value


def _stream_datasets() -> Sequence[str]:
    from renyiboost.stream.sources import STREAM_DATASETS

    return STREAM_DATASETS


def _scenarios() -> Sequence[str]:
    from renyiboost.stream.sources import SCENARIOS

    return SCENARIOS


def _methods() -> Sequence[str]:
    from renyiboost.experiments.grid import RUNNERS

    return sorted(RUNNERS)


def _suite() -> Sequence[str]:
    from renyiboost.experiments.suite import SUITE

    return list(SUITE)


def _spaces() -> Sequence[str]:
    from renyiboost.experiments.tune import SPACES

    return sorted(SPACES)


# ---------------------------------------------------------------------------------- the group
@click.group(context_settings=CONTEXT)
@click.version_option(package_name="renyiboost", prog_name="renyiboost")
@click.option("--log-level", type=click.Choice(["DEBUG", "INFO", "WARNING", "ERROR"],
                                               case_sensitive=False), default="WARNING",
              help="level of renyiboost's log records on stderr")
@click.option("--debug", is_flag=True, help="show the traceback of an error instead of one line")
def cli(log_level: str, debug: bool) -> None:
    """Differentially private gradient-boosted trees on event streams (S-GBDT with an
    individual Rényi filter)."""
    logging.basicConfig(level=log_level.upper(), stream=sys.stderr, format=LOG_FORMAT)
    logging.getLogger("renyiboost").setLevel(log_level.upper())
    logging.captureWarnings(True)  # schema and privacy warnings on the same channel


# ---------------------------------------------------------------------------------- demo
@cli.command(context_settings=CONTEXT)
@click.option("--dataset", type=LazyChoice(_stream_datasets), default="abalone",
              help="bundled data set or river generator to replay")
@click.option("--scenario", type=LazyChoice(_scenarios), default="late",
              help="drift scenario (late: a sub-population arrives last)")
@click.option("--epsilon", type=float, default=1.0, callback=_epsilon,
              help="target ε per key (a finite number > 0)")
@click.option("--delta", type=float, default=1e-6, callback=_delta,
              help="target δ per key (far below 1/n, at most 0.01)")
@click.option("--batch-size", type=click.IntRange(min=1), default=250,
              help="records per replayed batch")
@click.option("--expected-records", type=click.IntRange(min=1), default=None,
              help="public size hint for the default policy (none: its prior)")
@click.option("--train-every", type=click.IntRange(min=1), default=None,
              help="fixed trigger interval instead of the default growing schedule")
@click.option("--trees-per-trigger", type=click.IntRange(min=1), default=None,
              help="rounds run by a trigger")
@click.option("--state", default="out/demo/state.db", callback=_not_blank,
              help="SQLite state file (a store the demo created is replaced unless "
                   "--resume; any other file there is refused)")
@click.option("--resume", is_flag=True, help="continue the state file instead of a new model")
@click.option("--plot", "plot_path", type=OutputFile(), default="out/demo/demo.png",
              help="where the plot goes")
@click.option("--json", "json_path", type=OutputFile(), default=None,
              help="write the per-batch history here (each row's operator counts marked "
                   "as operator telemetry)")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="seeded noise, for tests only")
def demo(**options: Any) -> int:
    """Replay a bundled data set under drift through the engine (the main job)."""
    from renyiboost.experiments.demo import run_demo

    return run_demo(**options)


# ---------------------------------------------------------------------------------- Kafka
def _config_option(function: Callable[..., Any]) -> Callable[..., Any]:
    return click.option("--config", required=True, type=click.Path(dir_okay=False),
                        help="TOML config of `renyiboost train` (see connectors.service)")(
        function)


def _shards_option(help_text: str) -> Callable[..., Any]:
    return click.option("--shards", type=click.IntRange(min=1), default=None, metavar="N",
                        help=help_text)


SHARDS_HELP = ("a key-sharded deployment of N shards: --state is then a directory (one "
               "SQLite file per shard) or a postgresql:// URL (one schema per shard)")


def _load_config(path: str, overrides: dict[str, Any]) -> Any:
    from renyiboost.connectors.service import load_config

    return load_config(path, overrides)  # a bad file is an error (1), not a usage error (2)


@cli.command(context_settings=CONTEXT)
@_config_option
@click.option("--source", default=None, help="kafka://host:port/topic or memory:DATASET "
              "(default: the config's)")
@click.option("--state", default=None, callback=_not_blank, help="state store: a SQLite "
              "file or a postgresql://…[?schema=name] URL (must exist, see --new-state)")
@click.option("--new-state", is_flag=True, help="create the state file first (refused if it "
              "exists): only for a model that was never published")
@click.option("--model-topic", default=None, callback=_not_blank, help="topic the releases go to (default: the "
              "config's)")
@click.option("--model-name", default=None, callback=_not_blank, help="the releases' message key (default: the "
              "config's)")
@click.option("--max-idle", type=click.FloatRange(min=0, min_open=True), default=None,
              callback=_finite,
              help="stop after this many idle seconds")
@click.option("--json", "as_json", is_flag=True,
              help="operator telemetry as JSON lines on standard output")
@_shards_option(SHARDS_HELP)
@click.option("--ray", "ray_address", default=None, metavar="ADDRESS",
              help="run the shards as Ray actors: local (a Ray instance on this machine), auto "
                   "(the running cluster) or ray://host:port; without it the shards run in "
                   "this process")
def train(config: str, source: str | None, state: str | None, new_state: bool,
          model_topic: str | None, model_name: str | None, max_idle: float | None,
          as_json: bool, shards: int | None, ray_address: str | None) -> int:
    """Train continuously from a Kafka topic (or memory:DATASET) into a state store."""
    from renyiboost.connectors.service import run_train

    if ray_address is not None and shards is None:
        raise click.UsageError("--ray needs --shards")
    loaded = _load_config(config, {"source": source, "state": state,
                                   "model_topic": model_topic, "model_name": model_name})
    if loaded.source.startswith("memory:"):
        refuse_unread_options(["model_topic", "model_name", "max_idle"],
                              "a memory: source (it trains on the data set once and "
                              "publishes nothing)")
    return run_train(loaded, max_idle=max_idle, as_json=as_json, new_state=new_state,
                     shards=shards, ray_address=ray_address)


@cli.group(context_settings=CONTEXT)
def state() -> None:
    """Create a state store (state init) or show its operator telemetry (state info)."""


def _store_options(function: Callable[..., Any]) -> Callable[..., Any]:
    """``--config``, ``--state`` and ``--shards`` of the ``state`` subcommands."""
    function = _shards_option(SHARDS_HELP)(function)
    function = click.option("--state", "location", default=None, callback=_not_blank,
                            help="state store, a SQLite file or a postgresql:// URL "
                                 "(default: the config's)")(function)
    return _config_option(function)


@state.command("init", context_settings=CONTEXT)
@_store_options
def state_init(config: str, location: str | None, shards: int | None) -> int:
    """Create the config's state store (refused if it exists)."""
    from renyiboost.connectors.service import init_state

    created = init_state(_load_config(config, {"state": location}), shards)
    for identity, where in created if isinstance(created, list) else [created]:
        click.echo(f"created state store {where} (store id {identity.store_id})")
    return 0


@state.command("info", context_settings=CONTEXT)
@_store_options
def state_info(config: str, location: str | None, shards: int | None) -> int:
    """Print the store's operator telemetry as JSON (not for release). It opens the store
    as a trainer does: stop the trainer first; the open counts (the store's epoch goes up
    by one) and a snapshot is written on close."""
    from renyiboost.connectors.service import engine_config
    from renyiboost.stream.engine import StreamEngine

    loaded = _load_config(config, {"state": location})
    if shards is not None:
        from renyiboost.stream.sharded import ShardedEngine, shard_locations

        sharded = ShardedEngine(engine_config(loaded.model),
                                shard_locations(loaded.state, shards))
        try:
            click.echo(json.dumps(sharded.operator_telemetry(), indent=1))
        finally:
            sharded.close()
        return 0
    engine = StreamEngine(engine_config(loaded.model), store=loaded.state,
                          seed=loaded.model.seed)
    try:
        click.echo(json.dumps(engine.operator_telemetry().model_dump(), indent=1))
    finally:
        engine.close()
    return 0


@cli.command(context_settings=CONTEXT)
@_config_option
@click.option("--state", default=None, callback=_not_blank,
              help="the deployment's state (default: the config's)")
@_shards_option("its number of shards now (omit for a single, unsharded store)")
@click.option("--to", "to_shards", type=click.IntRange(min=1), required=True, metavar="M",
              help="the number of shards after")
@click.option("--into", default=None, callback=_not_blank,
              help="where the new shards' stores go (default: "
              "--state; required when --state is a single SQLite file)")
def reshard(config: str, state: str | None, shards: int | None, to_shards: int,
            into: str | None) -> int:
    """Move a deployment's key ledgers to another number of shards (nothing trains).

    Every key's spent budget, retirement, row and margin moves to the shard that owns it
    under the new partition map; the old stores are then refused for good. Stop the
    trainer first. Safe to run again after a crash."""
    from renyiboost.connectors.service import run_reshard

    return run_reshard(_load_config(config, {"state": state}), shards, to_shards, into)


#: ``--client-config`` of the commands that reach Kafka without a renyiboost config.
CLIENT_CONFIG = click.option(
    "--client-config", type=click.Path(exists=True, dir_okay=False, path_type=Path),
    default=None, help="librdkafka settings, one key=value a line (a secured cluster's "
    "security.protocol, sasl.*, ssl.*), as [kafka] extra gives them to train")


def _client_settings(path: Path | None) -> dict[str, str]:
    from renyiboost.connectors.kafka import read_client_config

    if path is None:
        return {}
    try:
        return read_client_config(path)
    except (OSError, UnicodeDecodeError, ValueError) as error:
        raise click.BadParameter(str(error), param_hint="--client-config") from None


@cli.command(context_settings=CONTEXT)
@click.argument("dataset", type=LazyChoice(_stream_datasets))
@click.option("--scenario", type=LazyChoice(_scenarios), default="iid", help="drift scenario")
@click.option("--to", "target", required=True, help="kafka://host:port/topic")
@click.option("--rate", type=click.FloatRange(min=0), default=0.0, callback=_finite,
              help="events per second (0: as fast as possible)")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="events to produce (none: all)")
@click.option("--seed", type=click.IntRange(min=0), default=0,
              help="shuffle seed of the scenario")
@click.option("--connect-timeout", type=click.FloatRange(min=0, min_open=True), default=30.0,
              callback=_finite, help="seconds to wait for the cluster before giving up")
@CLIENT_CONFIG
def replay(dataset: str, scenario: str, target: str, rate: float, limit: int | None,
           seed: int, connect_timeout: float, client_config: Path | None) -> int:
    """Produce a bundled data set under a drift scenario into a Kafka topic."""
    from renyiboost.connectors.service import run_replay

    return run_replay(dataset, scenario, target, rate, limit, seed, connect_timeout,
                      _client_settings(client_config))


@cli.command(context_settings=CONTEXT)
@click.option("--bootstrap", required=True, callback=_not_blank,
              help="Kafka bootstrap servers host:port")
@click.option("--model-topic", required=True, callback=_not_blank,
              help="the topic the trainer publishes its releases to")
@click.option("--model-name", default="model", callback=_not_blank,
              help="the releases' message key")
@click.option("--host", default="127.0.0.1", callback=_not_blank,  # '' listened on all
              help="address to listen on")
@click.option("--port", type=click.IntRange(1, 65535), default=8000, help="port to listen on")
@CLIENT_CONFIG
def serve(bootstrap: str, model_topic: str, model_name: str, host: str, port: int,
          client_config: Path | None) -> int:
    """An HTTP JSON predict endpoint that follows a model topic (public releases only)."""
    from renyiboost.connectors.serving import run_serve

    return run_serve(bootstrap, model_topic, model_name, host, port,
                     _client_settings(client_config))


# ---------------------------------------------------------------------------------- experiments
#: The options only one of ``tune``'s two modes reads: given to the other, they would be
#: silently ignored, so they are refused.
TUNE_PRIVATE_ONLY = ("delta", "mean_runs", "validation_share", "seed")
TUNE_SEARCH_ONLY = ("space", "against_config", "candidates", "seeds", "workers", "refine",
                    "refine_seeds")


def refuse_unread_options(unread: Sequence[str], mode: str) -> None:
    """A usage error naming every option in ``unread`` the user gave on the command line:
    the chosen ``mode`` does not read them, and ignoring them silently would run something
    other than what was asked."""
    from click.core import ParameterSource

    context = click.get_current_context()
    given = [name for name in unread
             if context.get_parameter_source(name) not in (None, ParameterSource.DEFAULT)]
    if given:
        flags = ", ".join("--" + name.replace("_", "-") for name in given)
        raise click.UsageError(f"{flags} {'does' if len(given) == 1 else 'do'} not apply to "
                               f"{mode}")


#: The options each ``experiment --preset`` reads (the others are refused).
PRESET_OPTIONS: dict[str, tuple[str, ...]] = {
    "paper": ("repeats", "workers", "out", "epsilons"),
    "field": ("datasets", "epsilons", "repeats", "out"),
}


def _check_datasets(preset: str | None, datasets: list[str] | None) -> None:
    """``experiment --datasets``: names the run can load (``nope`` once failed with exit
    code 1 only when the grid ran)."""
    if not datasets:
        return
    if preset == "field":
        from renyiboost.experiments.field import DATASETS as known
    else:
        from renyiboost.stream.sources import STREAM_DATASETS as known
    unknown = sorted(set(datasets) - set(known))
    if unknown:
        raise click.BadParameter(f"unknown {unknown}; choose from {', '.join(sorted(known))}",
                                 param_hint="'--datasets'")


@cli.command(context_settings=CONTEXT)
@click.option("--config", type=click.Path(dir_okay=False, exists=True), default=None,
              help="TOML file with GridConfig's keys (the options override it)")
@click.option("--preset", type=click.Choice(["paper", "field"]), default=None,
              help="paper: the S-GBDT paper's figures beside the peers (takes --repeats, "
                   "--workers, --out, --epsilons); field: the DP tree learners side by side on "
                   "held-out rows (takes --datasets, --epsilons, --repeats, --out)")
@click.option("--datasets", type=CommaList(), default=None, help="data sets, comma-separated")
@click.option("--scenarios", type=CommaList(choices=_scenarios), default=None,
              help="drift scenarios, comma-separated")
@click.option("--epsilons", type=CommaList(float), default=None, callback=_epsilons,
              help="ε values, comma-separated")
@click.option("--methods", type=CommaList(choices=_methods), default=None,
              help="methods, comma-separated (renyiboost's variants and the peers)")
@click.option("--repeats", type=click.IntRange(min=1), default=None, help="noise seeds per cell")
@click.option("--limit", type=click.IntRange(min=1), default=None,
              help="records per stream (none: all)")
@click.option("--batch-size", type=click.IntRange(min=1), default=None, help="records per batch")
@click.option("--train-every", type=click.IntRange(min=1), default=None,
              help="fixed trigger interval (none: the default growing schedule)")
@click.option("--trees-per-trigger", type=click.IntRange(min=1), default=None,
              help="rounds run by a trigger")
@click.option("--refits", type=click.IntRange(min=1), default=None,
              help="fits of a batch peer along the stream")
@click.option("--delta", type=float, default=None, callback=_delta,
              help="δ of every private method")
@click.option("--workers", type=click.IntRange(min=1), default=None, help="processes")
@click.option("--out", type=click.Path(file_okay=False), default=None, callback=_not_blank,
              help="output directory")
def experiment(config: str | None, preset: str | None, **options: Any) -> int:
    """A cached grid of prequential stream runs: tables and plots (unset options take the
    config file's value or GridConfig's default)."""
    given = {k: v for k, v in options.items() if v is not None}
    if preset is not None:
        keys = PRESET_OPTIONS[preset]
        refuse_unread_options(["config", *(k for k in options if k not in keys)],
                              f"--preset {preset} (it takes {', '.join('--' + k for k in keys)})")
    _check_datasets(preset, given.get("datasets"))
    if preset == "paper":
        from renyiboost.experiments import paper

        return paper.main(paper.PaperConfig(**given))
    if preset == "field":
        from renyiboost.experiments import field

        return field.main(field.FieldConfig(**given))
    from renyiboost.experiments.grid import run_experiment

    return run_experiment(config, **given)


@cli.command(context_settings=CONTEXT)
@click.option("--dataset", type=click.Choice(["abalone", "adult"]), required=True,
              help="the paper's data set")
@click.option("--epsilon", type=float, required=True, callback=_epsilon, help="target ε")
@click.option("--repeats", type=click.IntRange(min=1), default=5, help="noise seeds")
@click.option("--workers", type=click.IntRange(min=1), default=2, help="processes")
@click.option("--secure", is_flag=True, help="CSPRNG noise (not reproducible)")
@click.option("--json", "json_path", type=OutputFile(), default=None,
              help="write the result record here")
def reproduce(**options: Any) -> int:
    """Reproduce the S-GBDT paper's batch results (Abalone, Adult)."""
    from renyiboost.experiments.reproduce import run_reproduce

    return run_reproduce(**options)


@cli.command(context_settings=CONTEXT)
@click.option("--private", "private", is_flag=True,
              help="a private selection among the default candidates, accounted in the total "
                   "(ε, δ) (else: a non-private random search on training rows)")
@click.option("--dataset", required=True, help="paper data set (abalone, adult) or, with "
              "--private, a development-suite set")
@click.option("--epsilon", type=float, required=True, callback=_epsilon,
              help="target ε (with --private: the total, selection included)")
@click.option("--delta", type=float, default=1e-6, callback=_delta, help="δ (--private)")
@click.option("--mean-runs", type=float, default=None, callback=_mean_runs,
              help="expected runs of the private selection (none: the number of candidates)")
@click.option("--validation-share", type=click.FloatRange(0, 1, min_open=True, max_open=True),
              default=0.2, help="share of the rows a private run validates on")
@click.option("--seed", type=click.IntRange(min=0), default=None,
              help="seeded noise, for tests only (--private)")
@click.option("--space", type=LazyChoice(_spaces), default=None,
              help="search space (default: the data set's)")
@click.option("--against-config", is_flag=True,
              help="re-score the committed config beside the refined candidates")
@click.option("--candidates", type=click.IntRange(min=1), default=100,
              help="random candidates")
@click.option("--seeds", type=click.IntRange(min=1), default=2, help="noise seeds a candidate")
@click.option("--workers", type=click.IntRange(min=1), default=2, help="processes")
@click.option("--refine", type=click.IntRange(min=0), default=0, help="re-score the best K")
@click.option("--refine-seeds", type=click.IntRange(min=1), default=8,
              help="seeds of the re-scoring")
@click.option("--json", "json_path", type=OutputFile(), default=None,
              help="write the table or report here")
def tune(private: bool, dataset: str, epsilon: float, delta: float, mean_runs: float | None,
         validation_share: float, seed: int | None, space: str | None, against_config: bool,
         candidates: int, seeds: int, workers: int, refine: int, refine_seeds: int,
         json_path: str | None) -> int:
    """Hyper-parameter search on training data only (--private: accounted selection)."""
    refuse_unread_options(TUNE_SEARCH_ONLY if private else TUNE_PRIVATE_ONLY,
                          "a private selection (--private)" if private
                          else "the non-private search (without --private)")
    if private:
        from renyiboost.experiments.tune import run_private_tune

        if dataset not in _suite():
            raise click.BadParameter(f"{dataset!r}; choose from {', '.join(_suite())}",
                                     param_hint="--dataset")
        return run_private_tune(dataset, epsilon, delta, mean_runs, validation_share, seed,
                                json_path)
    if refine == 0:  # both belong to the re-scoring of the best --refine candidates
        refuse_unread_options(("against_config", "refine_seeds"),
                              "a search without --refine N (they re-score its best N)")
    from renyiboost.experiments.reproduce import DATASETS
    from renyiboost.experiments.tune import run_tune

    if dataset not in DATASETS:
        raise click.BadParameter(f"{dataset!r}; choose from {', '.join(DATASETS)}",
                                 param_hint="--dataset")
    return run_tune(dataset, epsilon, candidates, seeds, workers, refine, refine_seeds, space,
                    against_config, json_path)


# ---------------------------------------------------------------------------------- entry point
def one_line(error: BaseException) -> str:
    """An error as one line: pydantic's field errors without their documentation link, a
    missing optional package with the extra that installs it."""
    from pydantic import ValidationError

    from renyiboost.exceptions import field_errors

    if isinstance(error, ValidationError):
        return field_errors(error)
    if isinstance(error, ModuleNotFoundError) and error.name:
        root = error.name.split(".")[0]
        if root in EXTRAS:
            return (f"{error} (install the '{EXTRAS[root]}' extra: pip install "
                    f"'renyiboost[{EXTRAS[root]}]')")
    return " ".join(str(error).split()) or type(error).__name__


def main(argv: list[str] | None = None) -> int:
    """Run ``renyiboost …`` and return its exit code (0, 1 for an error, 2 for a usage
    error); the console script and ``python -m renyiboost`` exit with it."""
    args = list(sys.argv[1:] if argv is None else argv)
    try:
        code = cli.main(args=args, prog_name="renyiboost", standalone_mode=False)
    except click.exceptions.Exit as done:
        return int(done.exit_code)
    except click.ClickException as error:
        error.show()
        return int(error.exit_code)
    except (click.exceptions.Abort, KeyboardInterrupt):
        click.echo("renyiboost: interrupted", err=True)
        return 130
    except Exception as error:
        if "--debug" in args:
            raise
        click.echo(f"renyiboost: error: {one_line(error)} (--debug shows the traceback)",
                   err=True)
        return 1
    return int(code or 0)


if __name__ == "__main__":
    sys.exit(main())
