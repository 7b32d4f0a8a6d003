"""The ``renyiboost`` command through its real entry point (issue 16, item 1): --version,
help with defaults on every option, one-line errors with exit codes, tracebacks with
--debug, the extra named for a missing package, comma-separated lists."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import click
import pytest

from renyiboost.cli import cli, main, one_line


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
    debug = _run("--debug", "experiment", "--config", str(tmp_path / "missing.toml"))
    assert debug.returncode == 1 and "Traceback" in debug.stderr
    quiet = _run("experiment", "--config", str(tmp_path / "missing.toml"))
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
    assert main(["experiment", "--preset", "field", "--methods", "irf"]) == 2
    assert "--methods does not apply to --preset field" in capsys.readouterr().err
    assert main(["experiment", "--preset", "paper", "--config", "grid.toml"]) == 2
    assert "--config does not apply to --preset paper" in capsys.readouterr().err
    # a memory: source trains once and publishes nothing: --model-topic went unread
    config = str(Path(__file__).parents[1] / "examples" / "abalone.toml")
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


@pytest.mark.parametrize("argv", [
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--validation-share", "2"],
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--mean-runs", "-3"],
    ["tune", "--private", "--dataset", "abalone", "--epsilon", "1", "--mean-runs", "inf"],
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
