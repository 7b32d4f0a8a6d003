"""The ``renyiboost`` command through its real entry point (issue 16, item 1): --version,
help with defaults on every option, one-line errors with exit codes, tracebacks with
--debug, the extra named for a missing package, comma-separated lists."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import click
import pytest

from renyiboost.cli import OutputFile, cli, main, one_line
from renyiboost.stream.store import SQLiteStore


def _run(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "renyiboost", *args], check=False,
                          capture_output=True,
                          text=True, timeout=120)


def test_version_and_help_through_the_console_entry_point() -> None:
    from importlib.metadata import version

    done = _run("--version")
    assert done.returncode == 0
    assert done.stdout.strip() == f"renyiboost, version {version('renyiboost')}"
    helped = _run("reproduce", "--help")
    assert helped.returncode == 0 and "Usage: renyiboost reproduce" in helped.stdout
    assert "--repeats INTEGER RANGE" in helped.stdout and "[default: 5; x>=1]" in helped.stdout


def _walk(group: click.Group, prefix: str = ""):
    for name, command in group.commands.items():
        if isinstance(command, click.Group):
            yield from _walk(command, f"{prefix}{name} ")
        else:
            yield f"{prefix}{name}", command


@pytest.mark.parametrize(("name", "command"), list(_walk(cli)))
def test_every_option_has_help_and_a_shown_default(name: str, command: click.Command) -> None:
    assert command.help, name
    for param in command.params:
        if isinstance(param, click.Option):
            assert param.help, f"{name} {param.opts}"
            assert param.show_default is not False, f"{name} {param.opts}"


def test_errors_are_one_line_with_exit_codes(tmp_path, capsys) -> None:
    assert main(["demo", "--dataset", "nope"]) == 2  # a usage error
    assert "Invalid value for '--dataset'" in capsys.readouterr().err
    bad = tmp_path / "bad.toml"
    bad.write_text('[model]\nepsilon = "lots"\n')
    done = _run("train", "--config", str(bad))
    assert done.returncode in (1, 2)
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert len(lines) <= 3 and "Traceback" not in done.stderr
    assert "errors.pydantic.dev" not in done.stderr
    broken = tmp_path / "broken.toml"  # a missing file is a usage error now (review L)
    broken.write_text("repeats = [\n")
    debug = _run("--debug", "experiment", "--config", str(broken))
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    quiet = _run("experiment", "--config", str(broken))
    assert quiet.returncode == 1 and "Traceback" not in quiet.stderr
    assert quiet.stderr.startswith("renyiboost: error:") and len(quiet.stderr.splitlines()) == 1


def test_a_missing_package_names_its_extra() -> None:
    missing = ModuleNotFoundError("No module named 'interpret'", name="interpret")
    assert "pip install 'renyiboost[experiments]'" in one_line(missing)
    plot = ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib")
    assert "renyiboost[plot]" in one_line(plot)


def test_lists_are_comma_separated_and_checked() -> None:
    assert main(["experiment", "--methods", "irf,nope"]) == 2
    context = cli.make_context("renyiboost", ["experiment", "--epsilons", "0.5,1,4"],
                               resilient_parsing=True)
    assert context.protected_args or context.args  # the subcommand was parsed
    command = cli.commands["experiment"]
    sub = command.make_context("experiment", ["--epsilons", "0.5,1,4", "--datasets",
                                              "abalone,elec2"])
    assert sub.params["epsilons"] == [0.5, 1.0, 4.0]
    assert sub.params["datasets"] == ["abalone", "elec2"]


def test_options_a_mode_does_not_read_are_refused_instead_of_ignored(capsys) -> None:
    assert main(["tune", "--private", "--dataset", "abalone", "--epsilon", "1",
                 "--space", "adult", "--candidates", "5"]) == 2
    assert "--space, --candidates do not apply to a private selection" in capsys.readouterr().err
    assert main(["tune", "--dataset", "abalone", "--epsilon", "1", "--mean-runs", "3"]) == 2
    assert "--mean-runs does not apply to the non-private search" in capsys.readouterr().err
    assert main(["tune", "--dataset", "abalone", "--epsilon", "1", "--against-config",
                 "--refine-seeds", "3"]) == 2  # the committed config was never scored
    assert ("--against-config, --refine-seeds do not apply to a search without --refine N"
            in capsys.readouterr().err)
    config = str(Path(__file__).parents[1] / "examples" / "abalone.toml")
    assert main(["experiment", "--preset", "field", "--methods", "irf"]) == 2
    assert "--methods does not apply to --preset field" in capsys.readouterr().err
    assert main(["experiment", "--preset", "paper", "--config", config]) == 2  # a file
    assert "--config does not apply to --preset paper" in capsys.readouterr().err
    # a memory: source trains once and publishes nothing: --model-topic went unread
    assert main(["train", "--config", config, "--source", "memory:abalone", "--state",
                 "unused.db", "--model-topic", "t", "--max-idle", "1"]) == 2
    assert ("--model-topic, --max-idle do not apply to a memory: source"
            in capsys.readouterr().err)


@pytest.mark.parametrize("argv", [
    ["train", "--config", "c.toml", "--max-idle", "nan"],
    ["train", "--config", "c.toml", "--max-idle", "-1"],
    ["replay", "abalone", "--to", "kafka://127.0.0.1:1/t", "--rate", "-5"],
    ["replay", "abalone", "--to", "kafka://127.0.0.1:1/t", "--connect-timeout", "inf"],
])
def test_seconds_and_rates_are_finite_and_positive(argv, capsys) -> None:
    """``--max-idle nan`` never stopped and ``--rate -5`` produced: refused as usage errors
    before anything connects."""
    assert main(argv) == 2
    assert "Invalid value for" in capsys.readouterr().err


@pytest.mark.parametrize(("lines", "why"), [
    ("group.id=mine\n", "sets ['group.id'], which renyiboost sets itself"),
    ("# a comment\nsasl.username\n", ":2: expected key=value (a line without '=')"),
    # a Java properties file's colon: the line, with its secret, was echoed (review C)
    ("sasl.password: hunter2-S3cret\n", ":1: expected key=value (a line without '=')"),
])
@pytest.mark.parametrize("command", [
    ["serve", "--bootstrap", "127.0.0.1:1", "--model-topic", "m"],
    ["replay", "abalone", "--to", "kafka://127.0.0.1:1/t"]])
def test_a_client_config_that_would_be_misread_is_a_usage_error(tmp_path, capsys, lines, why,
                                                                command) -> None:
    """``serve`` and ``replay`` had no way to reach a secured cluster; ``--client-config``
    gives them librdkafka settings, and refuses a line it cannot read or a setting
    renyiboost makes itself before anything connects."""
    path = tmp_path / "client.properties"
    path.write_text(lines)
    assert main([*command, "--client-config", str(path)]) == 2
    error = capsys.readouterr().err
    assert why in error and "hunter2" not in error


@pytest.mark.parametrize("argv", [
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--validation-share", "2"],
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--mean-runs", "-3"],
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--mean-runs", "inf"],
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--mean-runs", "1e15"],
    ["experiment", "--epsilons", "0,-1"],
    ["experiment", "--epsilons", "1,nan"],
    ["experiment", "--datasets", "abalone,nope"],
    ["experiment", "--datasets", "image_segments"],  # a batch set the grid cannot replay
    ["experiment", "--preset", "field", "--datasets", "friedman"],  # a stream generator
    ["serve", "--bootstrap", " ", "--model-topic", "m"],
    ["serve", "--bootstrap", "127.0.0.1:1", "--model-topic", ""],
])
def test_bad_tuning_and_grid_values_are_usage_errors(argv, capsys) -> None:
    """These failed only once the selection or the grid ran, with exit code 1 (the
    serving and export reviewer's list); they are usage errors (2) before anything runs."""
    assert main(argv) == 2
    assert "Invalid value for" in capsys.readouterr().err


def test_a_report_path_is_checked_before_the_run_and_never_replaces_a_store(tmp_path, capsys,
                                                                          monkeypatch) -> None:
    """``--json`` wrote over whatever was there after the run: a copy of a trained store
    became a JSON file, and a path in a missing folder failed after the demo had committed
    its rounds (exit 1, budgets spent). Both are refused before anything runs; a new
    folder is created."""
    monkeypatch.chdir(tmp_path)
    store = tmp_path / "trained.db"
    SQLiteStore(store, create=True).close()
    before = store.read_bytes()
    for argv in (["demo", "--json", str(store)],
                 ["reproduce", "--dataset", "abalone", "--epsilon", "1", "--json", str(store)],
                 ["tune", "--dataset", "abalone", "--epsilon", "1", "--json", str(store)]):
        assert main(argv) == 2
        assert "is a SQLite database (a state store?)" in capsys.readouterr().err
    assert store.read_bytes() == before
    # nor one of the files beside it: over its .epoch record a report turned off the check
    # that refuses an older copy of the store (review C, 29 November)
    epoch = tmp_path / "trained.db.epoch"
    record = epoch.read_bytes()
    (tmp_path / "report.json").symlink_to(epoch)  # a link to it too (review D3)
    for beside in (epoch, tmp_path / "trained.db-wal", tmp_path / "report.json"):
        assert main(["tune", "--dataset", "abalone", "--epsilon", "1", "--json",
                     str(beside)]) == 2
        assert "file of the state store" in capsys.readouterr().err
    assert epoch.read_bytes() == record
    assert main(["demo", "--plot", "/proc/no/plot.png"]) == 2
    assert "cannot be written" in capsys.readouterr().err
    assert main(["demo", "--state", "s.db", "--json", "s.db"]) == 1
    assert "is the state file" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()  # nothing ran
    assert main(["demo", "--dataset", "sea", "--batch-size", "5000", "--json",
                 "new/folder/h.json"]) == 0
    assert json.loads((tmp_path / "new" / "folder" / "h.json").read_text())["history"]
    # what is there and not a regular file (a device, a pipe, a link to one) is written to,
    # never created and removed: the probe once unlinked /dev/null when run as root
    os.mkfifo("pipe")
    Path("null").symlink_to("/dev/null")
    for kept in ("pipe", "null"):
        assert OutputFile().convert(kept, None, None) == kept
    assert Path("pipe").is_fifo() and Path("null").is_symlink() and Path("/dev/null").exists()


def test_a_memory_source_trains_only_with_the_data_sets_own_features(tmp_path, capsys) -> None:
    """``memory:abalone`` rows come encoded by Abalone's schema: a misspelt feature trained
    with exit 0, and categories in another order published a schema that encodes "M" as
    another category than the trees had. Both are refused before a store is created."""
    example = (Path(__file__).parents[1] / "examples" / "abalone.toml").read_text()
    for old, new in (("length = [0, 1]", "lenght = [0, 1]"),
                     ('sex = ["M", "F", "I"]', 'sex = ["I", "F", "M"]'),
                     ('task = "regression"', 'task = "classification"')):
        config = tmp_path / "c.toml"
        config.write_text(example.replace(old, new).replace(
            'state = "out/abalone-state.db"', f'state = "{tmp_path / "s.db"}"'))
        assert main(["train", "--config", str(config), "--new-state"]) == 1
        assert "memory:abalone" in capsys.readouterr().err
        assert not (tmp_path / "s.db").exists()


def test_a_failed_kafka_start_with_new_state_leaves_no_store_behind(tmp_path, capsys) -> None:
    """With the broker away, ``train --new-state`` created the store, failed, and the same
    command run again was refused ("already exists") while an unused store stayed (review
    C, 29 November): a single store this start created and never used is removed, and a
    sharded deployment asks the broker before it creates its stores."""
    example = (Path(__file__).parents[1] / "examples" / "abalone.toml").read_text()
    config = tmp_path / "c.toml"
    config.write_text(example.replace('source = "memory:abalone"',
                                      'source = "kafka://127.0.0.1:1/abalone"').replace(
        'state = "out/abalone-state.db"', f'state = "{tmp_path / "s.db"}"').replace(
        'group_id = "renyiboost-abalone"', 'group_id = "renyiboost-abalone"\nconnect_timeout = 1'))
    for shards in ([], ["--shards", "2"]):
        for _ in range(2):  # the same command twice: the same error, not "already exists"
            assert main(["train", "--config", str(config), "--new-state", *shards]) == 1
            error = capsys.readouterr().err
            assert "already exists" not in error and "127.0.0.1:1" in error
            assert sorted(p.name for p in tmp_path.iterdir()) == ["c.toml"]


@pytest.mark.parametrize("shards", [[], ["--shards", "2"]], ids=["single", "sharded"])
def test_a_memory_source_stops_at_sigterm_and_names_the_settings_it_does_not_read(
        tmp_path, capsys, caplog, monkeypatch, shards) -> None:
    """Review C (29 November): SIGTERM killed a ``memory:`` replay at once (exit 143, nothing
    closed), where the documented stop finishes the batch, commits and closes; and the
    file's ``model_topic`` and ``[kafka]``, which such a source never reads, were passed
    over without a word. Review U #2: a replay over shards had no handler at all."""
    import logging
    import signal

    from renyiboost.stream.sources import InMemorySource

    batches = InMemorySource.batches

    def terminated_after_the_first(self, after: int = 0):
        for i, batch in enumerate(batches(self, after)):
            yield batch
            if i == 0:
                os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(InMemorySource, "batches", terminated_after_the_first)
    before = signal.getsignal(signal.SIGTERM)
    example = (Path(__file__).parents[1] / "examples" / "abalone.toml").read_text()
    config = tmp_path / "c.toml"
    config.write_text(example.replace('state = "out/abalone-state.db"',
                                      f'state = "{tmp_path / "s.db"}"'))
    with caplog.at_level(logging.INFO, logger="renyiboost.train"):
        assert main(["train", "--config", str(config), "--new-state", "--json", *shards]) == 0
    consumed = json.loads(capsys.readouterr().out.strip().splitlines()[-1])["consumed"]
    assert 0 < consumed < 4177
    assert "interrupted (signal 15)" in caplog.text
    assert "kafka, model_name, model_topic are for a Kafka source and not used" in caplog.text
    assert signal.getsignal(signal.SIGTERM) == before  # the process's own handler again


def test_a_kafka_run_gives_the_signal_handlers_back_and_commits_under_them() -> None:
    """SIGTERM stops the trainer; the final commit runs under the same handlers (a second
    signal does not cut it short), and the process's own handlers come back after: a Kafka
    run left them pointing at its closed trainer, which swallowed a later Ctrl-C (review
    U #3)."""
    import signal

    from renyiboost.connectors.service import _run_until_stopped

    calls: list[str] = []

    class Trainer:
        def run(self, max_idle, on_poll) -> None:
            os.kill(os.getpid(), signal.SIGTERM)
            calls.append("ran")

        def stop(self) -> None:
            calls.append("stop")

    def commit() -> None:
        os.kill(os.getpid(), signal.SIGINT)  # answered by the trainer's handler
        calls.append("commit")

    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    _run_until_stopped(Trainer(), None, True, then=commit)
    assert calls == ["stop", "ran", "stop", "commit"]
    assert {sig: signal.getsignal(sig) for sig in before} == before


def test_a_grid_of_nothing_that_can_run_is_refused_before_the_outputs(tmp_path, capsys,
                                                                       caplog) -> None:
    """A method for the other task was left out in silence; a grid of only such methods ran,
    exited 0 and emptied ``runs.csv`` and ``summary.md``. Each left-out combination is now
    named, and an empty grid is refused before the outputs are touched."""
    out = tmp_path / "grid"
    assert main(["experiment", "--datasets", "abalone", "--scenarios", "iid", "--epsilons",
                 "1", "--methods", "arf", "--repeats", "1", "--limit", "200", "--out",
                 str(out)]) == 1
    assert "no cell of this grid can run: abalone × arf (arf is for classification, " \
           "abalone is regression)" in capsys.readouterr().err
    assert not out.exists()
    assert "left out of the grid: abalone × arf" in caplog.text


def test_config_and_search_errors_are_one_plain_line(tmp_path, capsys, monkeypatch) -> None:
    """An unknown method in a grid file ended as ``error: 'nope'``, a grid file's syntax
    error did not name the file, a TOML's bad bounds printed pydantic's dump and link, and
    a search space of the other task failed inside a worker: each is now one line that
    names the file or option and says what to change."""
    monkeypatch.chdir(tmp_path)
    example = (Path(__file__).parents[1] / "examples" / "abalone.toml").read_text()
    Path("grid.toml").write_text('methods = ["nope"]\n')
    Path("broken.toml").write_text("methods = \n")
    Path("bounds.toml").write_text(example.replace("length = [0, 1]", "length = [1, 0]"))
    cases = [
        (["experiment", "--config", "grid.toml"],
         "methods: unknown methods ['nope']; choose from arf, "),
        (["experiment", "--config", "broken.toml"], "broken.toml: not a valid TOML file"),
        (["train", "--config", "bounds.toml", "--new-state"],
         "bounds.toml: model.features: feature 'length': bounds must be finite numbers"),
        (["tune", "--dataset", "abalone", "--epsilon", "1", "--space", "adult"],
         ("the search space 'adult' does not fit abalone: value: hess_clip (Newton leaves) "
          "applies to task='classification' only")),
    ]
    for argv, said in cases:
        assert main(argv) == 1
        err = capsys.readouterr().err
        assert said in err and len(err.strip().splitlines()) == 1, err
        assert "pydantic.dev" not in err and "input_value" not in err and "Value error" not in err


def test_log_records_have_levels_and_timestamps_at_the_chosen_level(tmp_path) -> None:
    from test_ledger import abalone_config

    config = abalone_config(tmp_path / "c.toml", state=tmp_path / "s.db")
    assert main(["state", "init", "--config", str(config)]) == 0
    quiet = _run("train", "--config", str(config))
    assert quiet.returncode == 0 and "INFO" not in quiet.stderr
    loud = _run("--log-level", "info", "train", "--config", str(config))
    assert loud.returncode == 0
    line = next(x for x in loud.stderr.splitlines() if "renyiboost.train" in x)
    stamp, level = line.split(" ")[:3], line.split(" ")[2]
    assert level == "INFO" and "training from memory:abalone" in line
    assert stamp[0].count("-") == 2 and stamp[1].count(":") == 2  # date and time


def test_the_experiment_modules_import_each_other_without_a_cycle() -> None:
    """The evaluation helpers live in experiments/evaluation.py; grid and paper no longer
    import each other (issue 16, item 3)."""
    import ast
    from pathlib import Path

    import renyiboost.experiments as package

    root = Path(package.__file__).parent
    graph: dict[str, set[str]] = {}
    for path in root.glob("*.py"):
        tree = ast.parse(path.read_text())
        graph[path.stem] = {node.module.rsplit(".", 1)[1] for node in ast.walk(tree)
                            if isinstance(node, ast.ImportFrom) and node.module
                            and node.module.startswith("renyiboost.experiments.")}
        graph[path.stem] |= {alias.name for node in ast.walk(tree)
                             if isinstance(node, ast.ImportFrom)
                             and node.module == "renyiboost.experiments"
                             for alias in node.names}

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        return any(n == goal or (n not in seen and reaches(n, goal, seen | {n}))
                   for n in graph.get(start, ()))

    cycles = [m for m in graph if reaches(m, m, {m})]
    assert not cycles, cycles


def test_a_replay_run_outside_the_main_thread_trains_without_signal_handlers(tmp_path,
                                                                           capsys) -> None:
    """Only the main thread may set signal handlers; a sharded ``memory:`` replay started
    from another thread (a notebook's worker, a test runner) failed with "signal only works
    in main thread" and left empty shard stores (review D7 #5)."""
    import threading

    example = (Path(__file__).parents[1] / "examples" / "abalone.toml").read_text()
    config = tmp_path / "c.toml"
    config.write_text(example.replace('state = "out/abalone-state.db"',
                                      f'state = "{tmp_path / "s.db"}"'))
    codes: list[int] = []
    thread = threading.Thread(target=lambda: codes.append(main(
        ["train", "--config", str(config), "--new-state", "--json", "--shards", "2"])))
    thread.start()
    thread.join(300)
    assert codes == [0], capsys.readouterr().err
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1])["consumed"] == 4177
