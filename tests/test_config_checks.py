"""Configuration is checked at the boundary, scikit-learn style: a bad ε, δ, learning rate,
clip, trigger growth, size hint, event format or command-line option is a ``ValueError`` (or a
usage error) that names the parameter, before anything is computed or created, never a
traceback from inside the policy or a store left behind."""

from __future__ import annotations

import math
import re
import warnings
from pathlib import Path

import numpy as np
import pytest
from pydantic import ValidationError

from renyiboost import SGBDTClassifier, SGBDTRegressor
from renyiboost.accounting.inputs import MAX_DELTA, check_delta, check_epsilon
from renyiboost.cli import main
from renyiboost.connectors.events import EventFormat
from renyiboost.connectors.service import load_config
from renyiboost.exceptions import NonPrivateWarning, PrivacyLeakWarning
from renyiboost.models.batch import SGBDT
from renyiboost.models.booster import SGBDTParams
from renyiboost.models.defaults import (
    PRIOR_RECORDS,
    STREAM_MIN_INTERVAL,
    STREAM_TRIGGER_GROWTH,
    STREAM_WARMUP,
    check_privacy_inputs,
    default_params,
    final_burst,
    stream_schedule,
)
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import EngineConfig

SCHEMA = PublicSchema(features={"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0))
BAD_EPSILONS = [-1, 0, 0.0, -0.5, math.inf, -math.inf, math.nan, "1", "nan", True, False,
                10 ** 400, 1j]
BAD_DELTAS = [0, -1e-6, 1, 1.5, math.inf, math.nan, "1e-6", True, None]


def _regressor(**kwargs):
    return SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0, 1), **kwargs)


def _classifier(**kwargs):
    return SGBDTClassifier({"a": (0.0, 1.0)}, **kwargs)


@pytest.mark.parametrize(("make", "message"), [
    (lambda: _classifier(depth=1.5), "SGBDTClassifier: depth: Input should be a valid integer"),
    (lambda: _regressor(recalibration={"every": "x"}),
     ("SGBDTRegressor: recalibration.every: must be a number, got str 'x'; "
      "recalibration.share: Field required")),
    (lambda: SGBDTClassifier({"a": "numeric", "b": (0, 1)}),
     "SGBDTClassifier: features: feature 'a': expected (lo, hi)"),
    (lambda: SGBDT(SCHEMA, task="regression", learning_rate=-1),
     "SGBDT: learning_rate: Input should be greater than 0"),
])
def test_a_refused_argument_is_one_line_naming_the_estimator_and_the_argument(make,
                                                                            message) -> None:
    """As scikit-learn refuses a parameter: a ``ValueError`` of one line, every refused
    argument named after the estimator, without pydantic's banner ("1 validation error
    for SGBDTParams"), documentation link or dump of the input (a whole feature table)."""
    with pytest.raises(ValueError) as caught:
        make()
    assert str(caught.value).startswith(message)
    assert "\n" not in str(caught.value) and "pydantic" not in str(caught.value)
    assert not isinstance(caught.value, ValidationError)


# ------------------------------------------------------------------ ε and δ (bugs 3 and 2)
@pytest.mark.parametrize("epsilon", BAD_EPSILONS, ids=repr)
def test_a_bad_epsilon_is_a_value_error_that_names_it(epsilon) -> None:
    """Not a traceback from the policy's arithmetic ("math domain error", OverflowError,
    "cannot convert float NaN to integer", TypeError)."""
    match = "epsilon must be a finite number > 0"
    for make in (_regressor, _classifier, lambda **kw: SGBDT(SCHEMA, **kw)):
        with pytest.raises(ValueError, match=match):
            make(epsilon=epsilon)
    with pytest.raises(ValueError, match=match):
        EngineConfig.from_defaults(SCHEMA, "regression", epsilon, 1e-6, 500)
    with pytest.raises(ValueError, match=match):
        default_params("regression", epsilon, 1_000)
    with pytest.raises(ValueError, match=match):
        SGBDTParams(epsilon=epsilon)
    with pytest.raises(ValueError, match=match):
        check_epsilon(epsilon)


def test_good_epsilons_pass_and_none_keeps_its_meaning() -> None:
    assert check_epsilon(np.float64(0.5)) == 0.5 and check_epsilon(2) == 2.0
    assert check_epsilon(None) is None
    with pytest.raises(ValueError, match="epsilon"):
        check_epsilon(None, allow_none=False)
    assert _regressor(epsilon=None).engine.config.params.epsilon is None
    assert _regressor(epsilon=np.float64(2.0)).engine.config.params.epsilon == 2.0


@pytest.mark.parametrize("delta", BAD_DELTAS, ids=repr)
def test_a_bad_delta_is_a_value_error_that_names_it(delta) -> None:
    match = "delta must be a finite number with 0 < delta < 1"
    for make in (_regressor, lambda **kw: SGBDT(SCHEMA, **kw)):
        with pytest.raises(ValueError, match=match):
            make(delta=delta)
    with pytest.raises(ValueError, match=match):
        SGBDTParams(delta=delta)
    with pytest.raises(ValueError, match=match):
        check_delta(delta)


@pytest.mark.parametrize("delta", [0.0101, 0.05, 0.5, 0.999])
def test_a_delta_above_one_percent_is_refused(delta) -> None:
    """No DP use is served by such a δ: it must be far below 1/n."""
    match = r"delta must be at most 0\.01.*far below 1/n"
    with pytest.raises(ValueError, match=match):
        _regressor(delta=delta, expected_records=50)
    with pytest.raises(ValueError, match=match):
        SGBDT(SCHEMA, delta=delta)
    with pytest.raises(ValueError, match=match):
        SGBDTParams(delta=delta)
    assert SGBDTParams(delta=MAX_DELTA).delta == MAX_DELTA


def test_the_policy_warns_when_delta_is_not_far_below_one_over_n() -> None:
    """δ · n ≥ 1 for the expected size n (a hint, or the prior of a stream without one)
    admits a release of some key's records verbatim."""
    for epsilon, delta, records in [(1.0, 1e-3, 1_000), (0.5, 1e-3, 5_000),
                                    (1.0, 1 / PRIOR_RECORDS, None), (1.0, 0.01, 100)]:
        with pytest.warns(PrivacyLeakWarning, match="far below 1/n"):
            check_privacy_inputs(epsilon, delta, records)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_privacy_inputs(1.0, 1e-6, 100_000)
        check_privacy_inputs(1.0, 1e-5, None)  # 10,000 records assumed: δ · n = 0.1
        check_privacy_inputs(None, 1e-3, 10_000)  # no privacy: δ means nothing
    with pytest.raises(ValueError, match="epsilon"):
        check_privacy_inputs(-1.0, 1e-6, 100)
    with pytest.raises(ValueError, match="delta"):
        check_privacy_inputs(1.0, 0.5, 100)


def test_a_stream_warns_when_delta_is_not_far_below_one_over_its_size() -> None:
    """Through the estimators: the hint, or the prior without one (needs the one-line call
    of ``check_privacy_inputs`` in ``EngineConfig.from_defaults``)."""
    with pytest.warns(PrivacyLeakWarning, match="far below 1/n"):
        _regressor(delta=1e-3, expected_records=5_000)
    with pytest.warns(PrivacyLeakWarning, match="far below 1/n"):
        _classifier(delta=1e-3)  # the prior: 10,000 records
    with pytest.warns(PrivacyLeakWarning, match="far below 1/n"):
        EngineConfig.from_defaults(SCHEMA, "regression", 1.0, 1e-3, 2_000)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        _regressor(delta=1e-6, expected_records=5_000)
        with pytest.warns(NonPrivateWarning):  # no privacy: δ means nothing
            _regressor(delta=1e-3, epsilon=None)


def test_a_stream_that_outgrows_one_over_delta_says_so_once() -> None:
    """δ is judged against the hint at construction; a stream of 300,000 keys past a hint
    of 1,000 with δ = 1e-5 said nothing. Positions are public: passing 1/δ of them warns,
    once, at the trigger that passes it (a private count of people could not be told)."""
    model = _regressor(delta=1e-3, expected_records=200, seed=0)  # δ · 200 = 0.2: quiet
    rng = np.random.default_rng(0)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for i, x in enumerate(rng.uniform(0, 1, 2_500).tolist()):
            model.learn_one({"a": x}, x, key=i)
    said = [str(w.message) for w in caught if issubclass(w.category, PrivacyLeakWarning)]
    assert len(said) == 1 and "passed" in said[0] and "1/delta = 1,000" in said[0]
    assert int(said[0].split("passed ")[1].split(" ")[0].replace(",", "")) >= 1_000
    quiet = _regressor(delta=1e-6, expected_records=200, seed=0)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        for i, x in enumerate(rng.uniform(0, 1, 2_500).tolist()):
            quiet.learn_one({"a": x}, x, key=i)
    from renyiboost.stream.sharded import ShardedEngine

    sharded = ShardedEngine(EngineConfig.from_defaults(SCHEMA, "regression", 1.0, 1e-3, 200),
                            [None, None], seed=0)
    X = rng.uniform(0, 1, (2_500, 1))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for start in range(0, 2_500, 500):
            sharded.add(X[start:start + 500], list(X[start:start + 500, 0]),
                        [str(i) for i in range(start, start + 500)])
    assert sum("1/delta = 1,000" in str(w.message) for w in caught) == 1


def test_a_batch_fit_warns_when_delta_is_not_far_below_one_over_its_rows() -> None:
    """Needs the one-line call of ``check_privacy_inputs`` in ``SGBDT.fit``. The warning
    does not print the private number of rows (logs keep it: it said "n = 2,000
    records") nor δ · n, which gives it away; a public hint it may print."""
    rng = np.random.default_rng(0)
    X = rng.uniform(0, 1, (2_000, 1))
    y = X[:, 0]
    with pytest.warns(PrivacyLeakWarning, match="far below 1/n") as caught:
        SGBDT(SCHEMA, epsilon=1.0, delta=1e-3, rounds=3, depth=1).fit(X, y)
    text = " ".join(str(w.message) for w in caught)
    assert "2,000" not in text and "2000" not in text and " = 2 " not in text
    with pytest.warns(PrivacyLeakWarning, match="n = 3,000 records"):
        SGBDT(SCHEMA, epsilon=1.0, delta=1e-3, rounds=3, depth=1,
              expected_records=3_000).fit(X, y)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        SGBDT(SCHEMA, epsilon=1.0, delta=1e-6, rounds=3, depth=1).fit(X, y)


def test_no_benchmark_or_experiment_uses_a_delta_above_one_percent() -> None:
    """The refusal breaks nothing that runs today: every δ literal of the benchmarks and
    the experiments is at most 1 %."""
    root = Path(__file__).resolve().parents[1]
    from renyiboost.experiments.field import FieldConfig
    from renyiboost.experiments.grid import GridConfig

    assert GridConfig().delta <= MAX_DELTA and FieldConfig().delta <= MAX_DELTA
    literal = re.compile(r"\bdelta\b[\"']?\s*[:=]\s*([0-9][0-9._e-]*)", re.IGNORECASE)
    found = [float(value) for folder in ("benchmarks", "src/renyiboost/experiments")
             for path in (root / folder).glob("*.py")
             for value in literal.findall(path.read_text())]
    assert found and max(found) <= MAX_DELTA


# ------------------------------------------------------------------ finite numbers (bug 11)
@pytest.mark.parametrize("name", ["learning_rate", "grad_clip", "reg_lambda",
                                  "reg_lambda_noise_stds", "leaf_clip", "count_share",
                                  "sampling_rate", "min_sensitivity2", "smoothing"])
@pytest.mark.parametrize("value", [math.inf, math.nan])
def test_every_float_parameter_must_be_finite(name, value) -> None:
    with pytest.raises(ValidationError, match=name):
        SGBDTParams(**{name: value})
    with pytest.raises(ValueError, match=name):
        EngineConfig.from_defaults(SCHEMA, "regression", 1.0, 1e-6, 500, **{name: value})
    if name != "min_sensitivity2":  # (not an estimator keyword)
        with pytest.raises(ValueError, match=name):
            _regressor(**{name: value})


def test_an_infinite_trigger_growth_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="trigger_growth must be a finite number"):
        _regressor(trigger_growth=math.inf)
    with pytest.raises(ValueError, match="trigger_growth"):
        EngineConfig.from_defaults(SCHEMA, "regression", 1.0, 1e-6, None,
                                   train_every=5, trigger_growth=math.inf)
    # built directly, it passed and crashed the stream at its first trigger (ceil(inf))
    from renyiboost.stream.schedule import TriggerSchedule

    config = EngineConfig.from_defaults(SCHEMA, "regression", 1.0, 1e-6, 500)
    with pytest.raises(ValidationError, match="trigger_growth"):
        EngineConfig(**config.model_dump() | {"trigger_growth": math.inf})
    with pytest.raises(ValueError, match="trigger_growth must be a finite number >= 0"):
        TriggerSchedule(10, 10, math.inf)


def test_options_that_would_be_silently_unused_and_malformed_features_are_refused() -> None:
    """``final_trees`` without a hint had no end to run at and was stored and never run;
    ``features`` that are not a mapping failed in ``dict()`` with a message about
    "dictionary update sequence element #0"."""
    with pytest.raises(ValueError, match="final_trees .*without a hint"):
        _regressor(final_trees=100)
    assert _regressor(final_trees=100, expected_records=5_000).engine.config.final_trees == 100
    # an end before the warmup: no round runs there, so the burst never ran, and a restart
    # owed it (a clean reopen at 500 owed 10 rounds no uninterrupted run grows)
    with pytest.raises(ValueError, match="final_trees run at final_at=50, before the warmup"):
        EngineConfig.from_defaults(SCHEMA, "regression", 1.0, expected_records=50,
                                   warmup=100, final_trees=10)
    for features in (["a", "b"], "ab", None, {}):
        with pytest.raises(ValueError, match="features must be a non-empty mapping"):
            SGBDTRegressor(features, target_bounds=(0.0, 1.0))


# ------------------------------------------------------------------ short hints (bug 5)
@pytest.mark.parametrize("hint", [1, 2, 30, 60, 99])
def test_a_hint_below_the_warmup_still_trains_at_its_end(hint) -> None:
    """The warmup is min(STREAM_WARMUP, hint), so the hinted end releases the initial score
    and every nominal round (before: a model that never trained, predicting 0.5). Its one
    trigger runs them all over every record, so there is no end burst: one ran after it,
    when every key was spent, and its trees were noise alone."""
    rng = np.random.default_rng(hint)
    for make, label in ((_regressor, float), (_classifier, lambda a: a > 0.5)):
        model = make(expected_records=hint, seed=1)
        config = model.engine.config
        assert config.warmup == hint and config.final_at == hint
        assert config.final_trees == 0 and config.trees_per_trigger == config.params.rounds
        for i in range(hint):
            a = float(rng.uniform())
            model.learn_one({"a": a}, label(a), key=i)
        assert model.engine.initialized
        assert model.engine.booster.rounds_done == config.params.rounds
        assert model.finish() == 0  # the hinted end is no place for a finish() burst


def _schedule_before(records: float, batch_rounds: int) -> dict:
    """:func:`stream_schedule` and :func:`final_burst` before the fix (a warmup of 100
    always)."""
    longest = max(1, (max(int(records), 1) - STREAM_WARMUP) // max(batch_rounds, 1))
    return {"warmup": STREAM_WARMUP, "train_every": min(STREAM_MIN_INTERVAL, longest),
            "trigger_growth": STREAM_TRIGGER_GROWTH, "max_train_every": longest}


@pytest.mark.parametrize("records", [100, 101, 130, 199, 405, 1_000, 4_177, PRIOR_RECORDS,
                                     250_000])
@pytest.mark.parametrize("rounds", [1, 20, 40, 77, 200, 1_000])
def test_schedules_of_hints_from_the_warmup_on_are_unchanged(records, rounds) -> None:
    assert stream_schedule(records, rounds) == _schedule_before(records, rounds)
    assert final_burst(records, rounds) == {  # 100 is the warmup itself: no burst
        "final_at": max(records, STREAM_WARMUP),
        "final_trees": int(rounds * 0.5) if records > STREAM_WARMUP else 0}


def test_the_hinted_policy_is_unchanged_from_the_warmup_on() -> None:
    for hint in (100, 130, 1_000):
        for epsilon in (0.5, 4.0, 100.0):
            config = EngineConfig.from_defaults(SCHEMA, "regression", epsilon, 1e-6, hint)
            assert config.warmup == STREAM_WARMUP and config.final_at == hint


# ------------------------------------------------------------------ the service and the CLI
def _toml(tmp_path: Path, model: str, events: str = "") -> Path:
    path = tmp_path / "bad.toml"
    path.write_text(f'source = "memory:abalone"\n[model]\ntarget_bounds = [0, 30]\n{model}\n'
                    f"[model.features]\na = [0, 1]\n{events}")
    return path


@pytest.mark.parametrize("line", ["epsilon = -1", "epsilon = inf", 'epsilon = "nan"',
                                  "epsilon = 0", 'epsilon = "1"', "delta = 0.5",
                                  "delta = nan"])
def test_state_init_refuses_a_bad_epsilon_and_leaves_no_store(tmp_path, capsys, line) -> None:
    config = _toml(tmp_path, line)
    with pytest.raises(ValueError, match=r"model\.(epsilon|delta): .*(epsilon|delta) must be"):
        load_config(config)
    for command in (["state", "init"], ["train", "--new-state"]):
        state = tmp_path / "x.db"
        # a bad file is an error (1), as a value the engine refuses is, not a usage error
        assert main([*command, "--config", str(config), "--state", str(state)]) == 1
        err = capsys.readouterr().err
        assert "must be" in err and err.startswith(f"renyiboost: error: {config}: model.")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"], command


@pytest.mark.parametrize("line", ["learning_rate = inf", "grad_clip = nan",
                                  "trigger_growth = inf", "warmup = -3"])
def test_a_config_the_engine_refuses_leaves_no_store(tmp_path, capsys, line) -> None:
    """The engine's configuration is built and validated before a store is created, and its
    error names the file and the table (a refused warmup once said only "train_every and
    warmup must be >= 1 and growth >= 0", with neither)."""
    config = _toml(tmp_path, line)
    name = line.split(" ")[0]
    for command in (["state", "init"], ["train", "--new-state"],
                    ["state", "init", "--shards", "2"], ["train", "--new-state", "--shards", "2"]):
        state = tmp_path / "x.db"
        assert main([*command, "--config", str(config), "--state", str(state)]) == 1
        err = capsys.readouterr().err
        assert name in err and err.startswith(f"renyiboost: error: {config}: model")
        if name not in ("trigger_growth", "warmup"):  # a pydantic field: as the file names it
            assert f"model.{name}:" in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"], command
    if name == "warmup":
        assert "warmup must be a finite number >= 1, got -3" in err


@pytest.mark.parametrize("source", ["memory:nope", "kafka://x", "memory:abalone",
                                    "kafka://u:s3cret@h:9092/t", "kafka://h:9092/t?security.protocol=SSL",
                                    "kafka://h:9092/a/b"])
def test_a_bad_source_leaves_no_store(tmp_path, capsys, source) -> None:
    """``train --new-state`` with a source that cannot be read created the store and then
    failed, and the corrected command was refused ("already exists"); ``state init``
    created a store for a config ``train`` then refused. The source is read (a bundled
    data set, whose features must be the config's: abalone's are not ``a``) or parsed (a
    Kafka URL) first, by every command that creates a store, sharded or not."""
    config = _toml(tmp_path, "epsilon = 1.0")
    config.write_text(config.read_text().replace("memory:abalone", source))
    for command in (["state", "init"], ["train", "--new-state"],
                    ["state", "init", "--shards", "2"], ["train", "--new-state", "--shards", "2"]):
        state = tmp_path / "x.db"
        assert main([*command, "--config", str(config), "--state", str(state)]) == 1
        err = capsys.readouterr().err
        assert err.startswith("renyiboost: error:"), command
        if source == "memory:abalone":
            assert "[model.features] must be the features of memory:abalone" in err
        if source == "memory:nope":  # the choices include the generators (review L)
            assert "unknown data set 'nope'" in err and "'agrawal'" in err, err
        if "@" in source or "?" in source:  # dropped or taken for a broker (review U #5)
            assert "kafka://host:port/topic and nothing more" in err and "s3cret" not in err
        if source.endswith("/a/b"):
            assert "a Kafka topic name is" in err and "'a/b'" in err
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"], command


@pytest.mark.parametrize("line", ["seed = true", 'seed = "7"', "expected_records = true",
                                  "train_every = true", "depth = true", 'learning_rate = "0.1"',
                                  'individual_filter = "yes"', "individual_filter = 1"])
def test_a_bool_or_text_is_never_taken_for_a_number(tmp_path, capsys, line) -> None:
    """pydantic's lax mode took ``seed = true`` for 1 (a production store marked seeded for
    good), ``expected_records = true`` for a stream of one record and ``"yes"`` for true
    (reviews U #4, Y #6): each is refused, in a config file, by the estimators and by the
    Kafka table, while numpy integers and TOML's numbers still pass."""
    name = line.split()[0]
    config = _toml(tmp_path, line)
    assert main(["state", "init", "--config", str(config), "--state",
                 str(tmp_path / "x.db")]) == 1
    err = capsys.readouterr().err
    assert f"model.{name}: must be " in err, err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"]
    value = {"true": True, "1": 1}.get(line.split(" = ")[1], line.split(" = ")[1].strip('"'))
    with pytest.raises(ValueError, match=f"{name}:? must be"):  # the estimators own seed=
        _regressor(**{name: value})
    from renyiboost.connectors.kafka_settings import KafkaClientTable

    with pytest.raises(ValueError, match="batch_size\n  Value error, must be a number"):
        KafkaClientTable(batch_size=True)
    model = _regressor(depth=np.int64(3), rounds=np.int32(5), learning_rate=np.float32(0.5))
    assert (model.engine.config.params.depth, model.engine.config.params.rounds) == (3, 5)


def test_a_bool_or_text_in_bounds_or_a_list_of_numbers_is_refused() -> None:
    """``target_bounds = [true, 10]`` became (1.0, 10.0) and ``epsilons = [0.5, true]`` a
    run at ε = 1 (review D7 #6); integers still pass."""
    from renyiboost.connectors.service import ModelConfig
    from renyiboost.experiments.field import FieldConfig

    table = {"task": "regression", "features": {"a": [0.0, 1.0]}}
    for bounds in ([True, 10], ["0", 10]):
        with pytest.raises(ValueError, match="target_bounds\n  Value error, must hold numbers"):
            ModelConfig(**table, target_bounds=bounds)
    assert ModelConfig(**table, target_bounds=[0, 10]).target_bounds == (0.0, 10.0)
    with pytest.raises(ValueError, match="must hold numbers, got bool True"):
        FieldConfig(epsilons=[0.5, True])
    assert FieldConfig(epsilons=[0.5, 1]).epsilons == [0.5, 1.0]


def test_a_model_table_names_a_classifiers_labels(tmp_path) -> None:
    """``labels`` in ``[model]``: the table had no such key, so ``renyiboost train`` could not
    train string or multiclass labels, which the engine and the event parser take (review
    U); a regression table with labels is refused."""
    from renyiboost.connectors.service import engine_config, load_config

    path = tmp_path / "iris.toml"
    path.write_text('source = "kafka://h:9092/flowers"\n[model]\ntask = "classification"\n'
                    'labels = ["setosa", "versicolor", "virginica"]\n'
                    "[model.features]\npetal = [0, 10]\n")
    config = engine_config(load_config(path).model)
    assert config.public_schema.labels == ["setosa", "versicolor", "virginica"]
    assert config.public_schema.n_classes == 3 and config.params.task == "classification"
    path.write_text(path.read_text().replace('task = "classification"',
                                             'task = "regression"\ntarget_bounds = [0, 1]'))
    with pytest.raises(ValueError, match="not both"):
        load_config(path)


def test_a_topic_kafka_would_refuse_is_refused_by_the_config(tmp_path, capsys) -> None:
    """A model topic or source topic the broker refuses was found when the first message
    went out (review U #5); each is a config error naming the rule."""
    from renyiboost.connectors.kafka_settings import KafkaSettings

    for topic in ("models/v2", "a b", "..", "x" * 250, "modèles"):
        with pytest.raises(ValueError, match="a Kafka topic name is"):
            KafkaSettings(bootstrap_servers="h:9092", topics=[topic])
        with pytest.raises(ValueError, match="a Kafka topic name is"):
            KafkaSettings(bootstrap_servers="h:9092", topics=["t"], model_topic=topic)
    config = _toml(tmp_path, "epsilon = 1.0")
    config.write_text('model_topic = "models v2"\n' + config.read_text())
    assert main(["state", "init", "--config", str(config), "--state",
                 str(tmp_path / "x.db")]) == 1
    assert "model_topic" in capsys.readouterr().err
    assert KafkaSettings(bootstrap_servers="h:9092", topics=["a.b_c-1"]).topics == ["a.b_c-1"]
    # the model topic on an event or dead-letter topic, a topic beside its own dead-letter
    # topic, a dead-letter name Kafka refuses, a topic twice, a poll librdkafka refuses
    # (review K2 #2, #5, #7)
    for topics, more, message in (
            (["events"], {"model_topic": "events.dlq"}, "is an event topic or a dead-letter"),
            (["events"], {"model_topic": "events"}, "is an event topic or a dead-letter"),
            (["a", "a.dlq"], {}, "its dead-letter topic 'a.dlq'"),
            (["x" * 246], {}, "an event topic takes at most 245"),
            (["a", "a"], {}, "names a topic twice"),
            (["a"], {"batch_size": 2_000_000}, "less than or equal to 1000000")):
        with pytest.raises(ValueError, match=message):
            KafkaSettings(bootstrap_servers="h:9092", topics=topics, **more)


@pytest.mark.parametrize("value", ["-1", "nan", "inf", "0"])
def test_demo_refuses_a_bad_epsilon_before_touching_its_state(tmp_path, capsys, value) -> None:
    state = tmp_path / "demo.db"
    assert main(["demo", "--epsilon", value, "--state", str(state),
                 "--plot", str(tmp_path / "demo.png")]) == 2
    assert "Invalid value for '--epsilon': epsilon must be a finite number > 0" in (
        capsys.readouterr().err)
    assert main(["demo", "--delta", value, "--state", str(state)]) == 2
    assert "Invalid value for '--delta'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


def test_demo_refuses_a_large_delta_and_nonpositive_counts(tmp_path, capsys) -> None:
    base = ["demo", "--state", str(tmp_path / "demo.db")]
    assert main([*base, "--delta", "0.1"]) == 2
    assert "delta must be at most 0.01" in capsys.readouterr().err
    for option in ("--batch-size", "--expected-records", "--train-every",
                   "--trees-per-trigger"):
        assert main([*base, option, "0"]) == 2
        assert f"Invalid value for '{option}'" in capsys.readouterr().err
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("limit", ["-5", "0"])
def test_replay_refuses_a_limit_below_one(capsys, limit) -> None:
    """(--limit -5 produced every event but the last five.)"""
    assert main(["replay", "abalone", "--to", "kafka://127.0.0.1:1/events", "--limit", limit,
                 "--connect-timeout", "0.5"]) == 2
    assert "Invalid value for '--limit'" in capsys.readouterr().err


# ------------------------------------------------------------------ event formats
@pytest.mark.parametrize(("fields", "message"), [
    ({"key_field": ""}, "key_field must be a non-empty field name"),
    ({"features_field": ""}, "features_field must be a non-empty field name"),
    ({"label_field": ""}, "label_field must be a non-empty field name"),
    ({"features_field": "d", "label_field": "d"}, "features_field and label_field"),
    ({"key_field": "x"}, "features_field and key_field"),
    ({"key_field": "y"}, "label_field and key_field"),
    ({"key_field": "v", "features_field": "v", "label_field": "w"},
     "features_field and key_field"),
])
def test_an_event_format_with_colliding_or_empty_names_is_a_config_error(fields,
                                                                        message) -> None:
    with pytest.raises(ValidationError, match=message):
        EventFormat(**fields)


def test_a_config_with_a_bad_event_format_is_refused_when_read(tmp_path) -> None:
    config = _toml(tmp_path, "", '[events]\nkey_field = "x"\n')
    with pytest.raises(ValueError, match="events: .*features_field and key_field"):
        load_config(config)
    assert EventFormat(key_field="user", features_field="f", label_field="l").key_field == "user"


@pytest.mark.parametrize(("setting", "value", "message"), [
    ("extra", {"bootstrap.servers": "127.0.0.1:1"}, "renyiboost sets itself"),
    ("extra", {"group.id": "other", "transactional.id": "x"}, "group.id"),
    ("connect_timeout", math.inf, "finite"),
    ("poll_timeout", math.nan, "poll_timeout"),
])
def test_kafka_settings_refuse_what_would_replace_the_managed_ones(setting, value,
                                                                  message) -> None:
    """``[kafka] extra = {"bootstrap.servers" = ...}`` once connected elsewhere than
    ``--source`` named (and the error named the wrong broker); an infinite timeout never
    timed out."""
    from renyiboost.connectors.kafka import KafkaSettings

    with pytest.raises(ValueError, match=message):
        KafkaSettings(bootstrap_servers="127.0.0.1:9092", topics=["t"], **{setting: value})
    assert KafkaSettings(bootstrap_servers="b:1", topics=["t"],
                         extra={"security.protocol": "SSL"}).extra == {"security.protocol": "SSL"}


def test_the_kafka_table_sets_the_dead_letter_timeout(tmp_path) -> None:
    """``dlq_timeout`` was named in README as an operator setting but only the Python
    ``KafkaSettings`` took it; the ``[kafka]`` table refused it as unknown."""
    from renyiboost.connectors.service import kafka_settings

    config = load_config(_toml(tmp_path, "", "[kafka]\ndlq_timeout = 5.0\n"),
                         {"source": "kafka://127.0.0.1:9092/events"})
    assert kafka_settings(config).dlq_timeout == 5.0
    with pytest.raises(ValueError, match="kafka.dlq_timeout"):
        load_config(_toml(tmp_path, "", "[kafka]\ndlq_timeout = 0\n"))


def test_the_kafka_table_names_the_producers_partitioner(tmp_path) -> None:
    """Shards check each event's partition against the producers' partitioner: the
    ``[kafka]`` table sets it (librdkafka's CRC-32 by default, the Java client's murmur2 on
    request) and refuses one renyiboost cannot check."""
    from renyiboost.connectors.service import kafka_settings

    source = {"source": "kafka://127.0.0.1:9092/events"}
    assert kafka_settings(load_config(_toml(tmp_path, "", ""), source)).partitioner == (
        "consistent_random")
    config = load_config(_toml(tmp_path, "", '[kafka]\npartitioner = "murmur2_random"\n'),
                         source)
    assert kafka_settings(config).partitioner == "murmur2_random"
    with pytest.raises(ValueError, match="kafka.partitioner"):
        load_config(_toml(tmp_path, "", '[kafka]\npartitioner = "random"\n'), source)


@pytest.mark.parametrize(("top", "kafka", "message"), [
    ("", "connect_timeout = inf", "kafka.connect_timeout: .*finite"),
    ("", 'extra = {"bootstrap.servers" = "127.0.0.1:1"}', "kafka.extra: .*sets itself"),
    ("", 'group_id = " "', "kafka.group_id: must not be empty"),
    ('model_topic = ""', "", "model_topic: must not be empty"),
    ('model_name = "  "', "", "model_name: must not be empty"),
])
@pytest.mark.parametrize("source", ["memory:abalone", "kafka://127.0.0.1:1/events"])
def test_a_bad_kafka_table_or_blank_name_is_the_files_error_whatever_the_source(
        tmp_path, capsys, top, kafka, message, source) -> None:
    """The ``[kafka]`` table was judged only when a Kafka trainer started: ``state init``
    (and a ``memory:`` source) accepted what ``train`` then refused, and the error did not
    name the file. A blank model name or topic was sent to the broker (review C, 29
    November). Now the file is refused when read, naming itself, and no store is made."""
    config = tmp_path / "bad.toml"
    config.write_text(f'source = "{source}"\n{top}\n[kafka]\n{kafka}\n[model]\n'
                      "target_bounds = [0, 30]\n[model.features]\na = [0, 1]\n")
    with pytest.raises(ValueError, match=f"^{re.escape(str(config))}: {message}"):
        load_config(config)
    for command in (["state", "init"], ["train", "--new-state"]):
        assert main([*command, "--config", str(config), "--state",
                     str(tmp_path / "x.db")]) == 1
        assert capsys.readouterr().err.startswith(f"renyiboost: error: {config}: ")
        assert sorted(p.name for p in tmp_path.iterdir()) == ["bad.toml"], command


@pytest.mark.parametrize("option", ["--model-topic", "--model-name"])
def test_train_refuses_a_blank_model_topic_or_name_as_a_usage_error(tmp_path, capsys,
                                                                      option) -> None:
    config = tmp_path / "ok.toml"
    config.write_text('source = "kafka://127.0.0.1:1/events"\n[model]\n'
                      "target_bounds = [0, 30]\n[model.features]\na = [0, 1]\n")
    assert main(["train", "--config", str(config), "--state", str(tmp_path / "x.db"),
                 "--new-state", option, " "]) == 2
    assert f"Invalid value for '{option}': must not be empty" in capsys.readouterr().err
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ok.toml"]


def test_the_json_schema_states_the_privacy_ranges() -> None:
    """The shared ε / δ checks run before pydantic's own, which left a config's JSON schema
    without any range; the ranges are stated again as constraints."""
    properties = SGBDTParams.model_json_schema()["properties"]
    assert {"exclusiveMinimum": 0, "type": "number"} in properties["epsilon"]["anyOf"]
    assert (properties["delta"]["exclusiveMinimum"], properties["delta"]["maximum"]) == (0, 0.01)


def test_blank_names_empty_lists_and_repeats_are_usage_errors(tmp_path, capsys) -> None:
    """Review L: ``serve --host ''`` listened on every interface; ``--state ''`` was read as
    ``.``; ``--epsilons ,`` ran a grid of no private cell and exited 0; ``--epsilons 1,1``
    ran one cell twice and counted it as two repeats; ``--epsilons inf`` was offered as
    "non-private" and then refused with exit 1; ``--seed -1`` created the demo's store
    before it failed; ``--out`` naming a file failed after the first cell; a missing
    ``--config`` was a bare errno message."""
    runs = [
        (["serve", "--bootstrap", "127.0.0.1:1", "--model-topic", "m", "--host", " "],
         "'--host'"),
        (["demo", "--state", " "], "'--state'"),
        (["demo", "--state", str(tmp_path / "d.db"), "--seed", "-1"], "'--seed'"),
        (["reshard", "--config", str(tmp_path / "c.toml"), "--to", "2", "--into", " "],
         "'--into'"),
        (["experiment", "--datasets", "abalone", "--epsilons", ","], "names nothing"),
        (["experiment", "--datasets", "abalone", "--methods", ","], "names nothing"),
        (["experiment", "--datasets", "abalone", "--epsilons", "0.5,,1"], "an empty item"),
        (["experiment", "--datasets", "abalone", "--epsilons", "1,1"],
         "named more than once"),
        (["experiment", "--datasets", "abalone,abalone"], "named more than once"),
        (["experiment", "--datasets", "abalone", "--epsilons", "inf"], "finite number > 0"),
        (["experiment", "--config", str(tmp_path / "missing.toml")], "does not exist"),
    ]
    (tmp_path / "file").write_text("x")
    runs.append((["experiment", "--datasets", "abalone", "--out", str(tmp_path / "file")],
                 "is a file"))
    for args, message in runs:
        assert main(args) == 2, args
        assert message in capsys.readouterr().err, args
    assert not (tmp_path / "d.db").exists()


def test_an_experiment_configs_error_names_the_file(tmp_path, capsys) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("repeats = 0\n")
    assert main(["experiment", "--config", str(bad)]) == 1
    assert f"{bad}: repeats" in capsys.readouterr().err


def test_the_demo_refuses_one_file_for_its_plot_and_history(tmp_path, capsys) -> None:
    """The history was written over the plot the demo said it wrote (review L #8)."""
    same = tmp_path / "out.png"
    assert main(["demo", "--state", str(tmp_path / "s.db"), "--plot", str(same),
                 "--json", str(same), "--seed", "1"]) == 1
    assert "is the --plot file" in capsys.readouterr().err
    assert not (tmp_path / "s.db").exists()
