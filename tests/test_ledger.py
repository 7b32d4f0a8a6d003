"""One key, one ledger, forever: stores that are never created implicitly, locked, pinned to
their calibration, checksummed, and that fail loudly (and whole) when the disk is full."""

from __future__ import annotations

import copy
import json
import logging
import pickle
import shutil
import sqlite3
import subprocess
import sys
import textwrap
import warnings
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from renyiboost import SGBDTRegressor
from renyiboost.accounting.budget import PrivacyAccountant
from renyiboost.cli import main as cli
from renyiboost.connectors.events import EventFormat, EventParser
from renyiboost.exceptions import (
    BudgetExceeded,
    InvalidRecord,
    LedgerConflict,
    StateStoreError,
    StoreLocked,
    StoreNotFound,
    TestingOnlyWarning,
)
from renyiboost.models.batch import SGBDT
from renyiboost.schema import PublicSchema
from renyiboost.stream.engine import StreamEngine
from renyiboost.stream.reshard import reshard
from renyiboost.stream.store import SQLiteStore
from renyiboost.validation import MAX_KEY_CHARS, normalise_key

warnings.simplefilter("ignore", TestingOnlyWarning)

FEATURES = {"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]}


def _model(store, **kw) -> SGBDTRegressor:
    params = {"features": FEATURES, "target_bounds": (0.0, 3.0), "epsilon": 1.0, "rounds": 6,
              "depth": 2, "sampling_rate": 0.5, "train_every": 25, "warmup": 25, "seed": 7}
    return SGBDTRegressor(**(params | kw), store=store)


def _feed(model, n: int, start: int = 0) -> None:
    rng = np.random.default_rng(start)
    for i in range(start, start + n):
        x = {"a": float(rng.uniform()), "b": float(rng.uniform(-5, 5)), "c": "xyz"[i % 3]}
        model.learn_one(x, float(np.clip(2 * x["a"], 0, 3)), key=f"k{i % 80}")


def _fed(tmp_path, n: int, **store) -> tuple:
    """A model on a new store at ``tmp_path / "s.db"`` that has learned ``n`` records."""
    path = tmp_path / "s.db"
    model = _model(SQLiteStore(path, create=True, **store))
    _feed(model, n)
    return path, model


# --------------------------------------------------------------------- never implicit


def test_a_missing_empty_or_identityless_file_is_never_a_new_store(tmp_path) -> None:
    with pytest.raises(StoreNotFound, match="never created implicitly"):
        _model(str(tmp_path / "missing.db"))
    empty = tmp_path / "empty.db"
    empty.touch()
    with pytest.raises(StoreNotFound, match="0 bytes"):
        _model(str(empty))
    other = tmp_path / "other.db"
    sqlite3.connect(other).execute("CREATE TABLE t(x)").connection.commit()
    with pytest.raises(StoreNotFound, match="no store identity"):
        _model(str(other))
    # refused before SQLite opens it: the file is not switched to WAL, no lock file is left
    assert sqlite3.connect(other).execute("PRAGMA journal_mode").fetchone() == ("delete",)
    assert not Path(f"{other}.lock").exists()
    garbage = tmp_path / "notes.db"
    garbage.write_bytes(b"not a database " * 100)
    with pytest.raises(StoreNotFound, match="not a SQLite database"):
        _model(str(garbage))
    wal = tmp_path / "wal.db"  # another program's table named meta: no raw SQLite error
    with sqlite3.connect(wal) as db:
        db.execute("PRAGMA journal_mode=WAL")
        db.execute("CREATE TABLE meta(k INTEGER, v INTEGER)")
    with pytest.raises(StoreNotFound, match="meta table is not a store's"):
        _model(str(wal))
    SQLiteStore(tmp_path / "store.db", create=True).close()  # a store copied by VACUUM INTO
    with sqlite3.connect(tmp_path / "store.db") as db:  # (no WAL mode) still opens
        db.execute(f"VACUUM INTO '{tmp_path / 'vacuumed.db'}'")
    with pytest.raises(LedgerConflict, match="is a copy"):  # beside its original: a copy
        SQLiteStore(tmp_path / "vacuumed.db")
    SQLiteStore(tmp_path / "store.db")._remove()  # the original gone, with its record
    SQLiteStore(tmp_path / "vacuumed.db").close()


def test_a_store_once_seeded_says_so_however_it_is_resumed(tmp_path) -> None:
    """A seeded store resumed without a seed released ``seeded_for_testing: false`` over
    trees whose noise a seed predicts (the guarantee read only this process's noise). A
    store once opened seeded is marked for good; a store from before the mark is known by
    the generator state in its snapshot. A seed on a production store (committed without
    one) is refused: it marked the store for good with only the generic warning, and every
    later release said seeded_for_testing; the store stays unseeded."""
    path, model = _fed(tmp_path, 100)
    model.engine.close()
    with sqlite3.connect(path) as db:  # a store from before the mark: its snapshot says it
        (marked,) = db.execute("DELETE FROM meta WHERE name = 'side:seeded_noise' "
                               "RETURNING value").fetchone()
    assert marked == "true"
    for _ in range(2):  # the mark is written again, and kept by a production engine's commits
        resumed = _model(str(path), seed=None)
        assert resumed.privacy_guarantee().seeded_for_testing
        assert resumed.release("m").guarantee.seeded_for_testing  # the public release too
        _feed(resumed, 30, start=100)
        resumed.engine.close()
    production = _model(SQLiteStore(tmp_path / "p.db", create=True), seed=None)
    _feed(production, 60)
    assert not production.privacy_guarantee().seeded_for_testing
    production.engine.close()
    with pytest.raises(LedgerConflict, match="production ledger"):
        _model(str(tmp_path / "p.db"), seed=3)
    again = _model(str(tmp_path / "p.db"), seed=None)  # refused, and released its lock
    assert not again.privacy_guarantee().seeded_for_testing
    again.engine.close()
    fresh = _model(SQLiteStore(tmp_path / "t.db", create=True), seed=3)  # a new store: fine
    assert fresh.privacy_guarantee().seeded_for_testing
    fresh.engine.close()


def test_a_state_file_without_its_write_ahead_log_is_refused(tmp_path) -> None:
    """The main file copied without its -wal (commits not yet checkpointed) holds no store."""
    path, model = _fed(tmp_path, 200)
    copy = tmp_path / "copy.db"
    shutil.copy(path, copy)  # the WAL (and the identity in it) stays behind
    model.engine.close()
    with pytest.raises(StoreNotFound):
        _model(str(copy))


def test_the_store_logs_its_identity_epoch_and_what_a_restart_restores(tmp_path, caplog) -> None:
    with caplog.at_level(logging.INFO, logger="renyiboost.store"):
        path, model = _fed(tmp_path, 200)
        rounds = model.engine.rounds_done
        model.engine.close()
        reopened = _model(str(path))
        reopened.engine.close()
    lines = [r.getMessage() for r in caplog.records if r.name == "renyiboost.store"]
    created = next(line for line in lines if line.startswith("created"))
    store_id = created.split("(store ")[1].split(",")[0]
    assert f"opened the state store {path} (store {store_id}, epoch 2)" in lines
    assert any(line.startswith(f"restoring from {path}: {rounds} stored trees")
               for line in lines), lines


def test_creating_a_store_over_an_existing_file_is_refused(tmp_path) -> None:
    path = tmp_path / "s.db"
    _model(SQLiteStore(path, create=True)).engine.close()
    with pytest.raises(LedgerConflict, match="already exists"):
        SQLiteStore(path, create=True)


# --------------------------------------------------------------------- one holder


def test_a_second_holder_is_refused_with_the_holders_name(tmp_path) -> None:
    path = tmp_path / "s.db"
    first = _model(SQLiteStore(path, create=True))
    with pytest.raises(StoreLocked, match=r"in use by pid \d+"):
        _model(str(path))
    first.engine.close()
    _model(str(path)).engine.close()  # released on close


def test_another_name_of_a_held_store_is_refused(tmp_path) -> None:
    """The lock was found by the path's name: a symbolic link, a hard link (with a WAL of
    its own) or a lock file removed as stale let a second engine open the same ledger while
    the first held it (a released round then vanished from the store). Every name of the
    file is refused now."""
    import os

    path = tmp_path / "s.db"
    first = _model(SQLiteStore(path, create=True))
    (tmp_path / "soft.db").symlink_to(path)
    os.link(path, tmp_path / "hard.db")
    for other in ("soft.db", "hard.db"):
        with pytest.raises(StoreLocked, match="in use"):
            SQLiteStore(tmp_path / other)
    (tmp_path / "s.db.lock").unlink()  # removed by hand as "stale"
    with pytest.raises(StoreLocked, match="under another name"):
        SQLiteStore(path)
    first.engine.close()
    SQLiteStore(tmp_path / "soft.db").close()  # free again, under any name


def test_a_killed_holder_releases_the_lock(tmp_path) -> None:
    path = tmp_path / "s.db"
    SQLiteStore(path, create=True).close()
    holder = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        import time
        from renyiboost.stream.store import SQLiteStore
        store = SQLiteStore({str(path)!r}); print("held", flush=True); time.sleep(60)""")],
        stdout=subprocess.PIPE)
    assert holder.stdout.readline().strip() == b"held"
    with pytest.raises(StoreLocked, match=f"pid {holder.pid}"):
        SQLiteStore(path)
    holder.kill()
    holder.wait(10)
    SQLiteStore(path).close()


# --------------------------------------------------------------------- pinned meaning


def test_a_changed_calibration_or_charge_grid_is_refused(tmp_path) -> None:
    """Same arguments, different numbers (e.g. another version of the accounting): refused."""
    path, model = _fed(tmp_path, 60)
    model.engine.close()
    for name, change in (("calibration", lambda c: c | {"sigma": c["sigma"] * 0.9}),
                         ("charge_grid_sha256", lambda c: "0" * 64)):
        db = sqlite3.connect(path)
        (stored,) = db.execute("SELECT value FROM meta WHERE name = ?", (name,)).fetchone()
        db.execute("UPDATE meta SET value = ? WHERE name = ?",
                   (json.dumps(change(json.loads(stored))), name))
        db.commit()
        with pytest.raises(LedgerConflict, match=f"different {name}"):
            _model(str(path))
        db.execute("UPDATE meta SET value = ? WHERE name = ?", (stored, name))
        db.commit()
        db.close()
    _model(str(path)).engine.close()


def test_a_corrupt_blob_is_detected(tmp_path) -> None:
    path, model = _fed(tmp_path, 200, snapshot_ratio=1e9)
    model.engine.store.close()  # a crash: the round events stay to be replayed
    db = sqlite3.connect(path)
    (data,) = db.execute("SELECT data FROM events WHERE kind = 'round' LIMIT 1").fetchone()
    flipped = bytes([data[0] ^ 1]) + data[1:]
    db.execute("UPDATE events SET data = ? WHERE kind = 'round' AND data = ?", (flipped, data))
    db.commit()
    db.close()
    with pytest.raises(StateStoreError, match="corrupt"):
        _model(str(path))


# --------------------------------------------------------------------- failures


def test_a_full_disk_is_reported_as_such_and_commits_nothing(tmp_path) -> None:
    path, model = _fed(tmp_path, 100, page_size=4096)  # small pages fill up at once
    engine = model.engine
    committed = engine.release_version
    db = engine.store._db
    (pages,) = db.execute("PRAGMA page_count").fetchone()
    db.execute(f"PRAGMA max_page_count = {pages + 1}")  # the "disk" is full from here on
    with pytest.raises(StateStoreError, match="database or disk is full") as caught:
        _feed(model, 400, start=100)
    assert "cannot rollback" not in str(caught.value)
    with pytest.raises(StateStoreError, match="failed commit"):
        _feed(model, 1, start=600)  # the engine stopped for good
    engine.close()
    again = _model(str(path))
    assert again.engine.release_version == committed  # nothing half-committed
    again.engine.close()


def abalone_config(path: Path, state: Path | None = None) -> Path:
    """A ``renyiboost train`` config at ``path`` for ``memory:abalone`` (its ``state`` if
    given), with Abalone's public schema."""
    from renyiboost.stream.sources import InMemorySource

    features = "\n".join(f"{name} = {json.dumps(list(spec))}"
                         for name, spec in InMemorySource("abalone").schema.features.items())
    state_line = "" if state is None else f'state = "{state}"'
    path.write_text(f"""
source = "memory:abalone"
{state_line}
[model]
task = "regression"
target_bounds = [0, 30]
[model.features]
{features}
""")
    return path


def test_the_command_line_reports_errors_as_one_line_and_exit_code_1(tmp_path, capsys) -> None:
    config = abalone_config(tmp_path / "c.toml", state=tmp_path / "missing.db")
    assert cli(["train", "--config", str(config)]) == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("renyiboost: error: no state store at")
    assert cli(["state", "init", "--config", str(config)]) == 0
    assert cli(["state", "init", "--config", str(config)]) == 1  # never over an old one
    assert "already exists" in capsys.readouterr().err
    assert cli(["train", "--config", str(config)]) == 0  # memory:abalone into the new store
    capsys.readouterr()
    assert cli(["state", "info", "--config", str(config)]) == 0
    info = json.loads(capsys.readouterr().out)
    assert info["channel"] == "operator-telemetry" and info["positions"] == 4177


# --------------------------------------------------------------------- keys


def test_keys_are_normalised_one_way() -> None:
    assert normalise_key("Zoe\u0308") == normalise_key("Zo\u00eb") == "Zo\u00eb"  # NFC
    assert normalise_key(7) == normalise_key("7") == normalise_key(np.int64(7)) == "7"
    assert normalise_key("caf\u00e9".encode()) == "caf\u00e9"
    for bad, reason in (("", "empty"), ("k" * (MAX_KEY_CHARS + 1), "longer"),
                        (b"\xff", "UTF-8"), (True, "str, int or bytes"),
                        (1.5, "str, int or bytes")):
        with pytest.raises(InvalidRecord, match=reason) as caught:
            normalise_key(bad)
        assert caught.value.reason == "key"


def test_one_person_under_two_spellings_has_one_budget() -> None:
    model = _model(None, rounds=2, sampling_rate=1.0, train_every=10, warmup=10)
    for i in range(60):
        model.learn_one({"a": 0.5}, 1.0, key="Zoe\u0308" if i % 2 else "Zo\u00eb")
    assert model.operator_budget_of("Zoe\u0308") == model.operator_budget_of("Zo\u00eb")
    assert model.operator_budget_of("Zo\u00eb").status == "retired"


# --------------------------------------------------------------------- one validator

_VALUES = st.one_of(
    st.none(), st.booleans(), st.integers(-10, 10), st.integers(10**300, 10**310),
    st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=3),
    st.lists(st.integers(), max_size=2),
)


@settings(max_examples=300, deadline=None)
@given(x=st.dictionaries(st.sampled_from(["a", "b", "c", "zzz"]), _VALUES, max_size=4),
       y=_VALUES)
def test_learn_one_and_the_kafka_parser_judge_every_record_alike(x, y) -> None:
    """The same record (as JSON would carry it) is accepted by both paths with the same
    row and label, or refused by both with the same reason."""
    model = _model(None, seed=1)
    parser = EventParser(model.engine.validator, EventFormat())
    try:
        value = json.dumps({"x": x, "y": y}).encode()
    except (ValueError, OverflowError):
        return
    parsed = parser.parse(value, b"k1")
    decoded = json.loads(value)
    try:
        model.learn_one(decoded["x"], decoded["y"], key="k1")
    except InvalidRecord as why:
        assert getattr(parsed, "reason", None) == why.reason, (why, parsed)
        return
    assert not hasattr(parsed, "reason"), parsed
    engine = model.engine
    np.testing.assert_array_equal(engine._pending_rows[-1].ravel(), parsed.row)
    assert engine._pending_targets[-1] == parsed.label


def test_learn_many_learns_the_valid_rows_and_names_the_first_bad_one() -> None:
    import pandas as pd

    model = _model(None, train_every=1000, warmup=1000)
    frame = pd.DataFrame({"a": [0.1, np.nan, 0.3, 0.4], "b": [1.0, 2.0, np.inf, 0.0],
                          "c": ["x", "y", "z", None]})
    # a DataFrame's NaN is a missing value (row 1); an infinite value is refused (row 2)
    with pytest.raises(InvalidRecord, match="1 of 4 rows were not learned; row 2"):
        model.learn_many(frame, pd.Series([1.0, 1.0, 1.0, 2.0]), keys=["p", "q", "r", "s"])
    assert model.engine.n_pending == 3 and model.engine.positions == 4


def test_close_is_idempotent_and_releases_the_lock_when_its_snapshot_fails(
    tmp_path, monkeypatch
) -> None:
    path, model = _fed(tmp_path, 100)
    engine = model.engine
    committed = engine.release_version

    def failing(change) -> None:
        raise StateStoreError("injected: the closing snapshot could not be written")

    monkeypatch.setattr(engine.store, "commit", failing)
    with pytest.raises(StateStoreError, match="injected"):
        engine.close()
    engine.close()  # a second close does nothing
    again = _model(str(path))  # the lock is free, the last commit intact
    assert again.engine.release_version == committed
    again.engine.close()


# --------------------------------------------------------------------- copies
def test_a_copy_of_a_model_that_learned_answers_but_never_learns(tmp_path) -> None:
    """``copy.deepcopy`` and pickle copy an in-memory ledger: two copies that both learned
    would give every key two budgets under one guarantee each. The copy answers as the
    original does and refuses to learn; the original goes on; a copy of a model that has
    seen nothing is a new model. A model on a durable store is never copied at all."""
    model = _model(None)
    blank = copy.deepcopy(model)
    _feed(model, 100)
    x = {"a": 0.3, "b": 1.0, "c": "y"}
    for twin in (copy.deepcopy(model), pickle.loads(pickle.dumps(model))):
        assert twin.predict_one(x) == model.predict_one(x)
        with pytest.raises(LedgerConflict, match="copy .* of one that had already learned"):
            twin.learn_one(x, 1.0, key="k1")
        with pytest.raises(LedgerConflict):
            twin.finish()
        assert twin.engine.positions == 100
    _feed(model, 30, start=100)
    assert model.engine.positions == 130
    _feed(blank, 30)
    assert blank.engine.positions == 30
    _, durable = _fed(tmp_path, 30)
    with pytest.raises(LedgerConflict, match="cannot be copied"):
        copy.deepcopy(durable)
    with pytest.raises(LedgerConflict, match="cannot be copied"):
        pickle.dumps(durable)
    durable.engine.close()


def test_a_copy_inside_a_group_commit_is_refused() -> None:
    """A copy taken inside a ``group_commit`` block kept the block's deferral and refused
    every read for good (review D4 #5); it is refused at once, and a copy after the block
    answers as the original does."""
    model = _model(None)
    _feed(model, 100)
    x = {"a": 0.3, "b": 1.0, "c": "y"}
    with model.engine.group_commit():
        _feed(model, 20, start=100)
        with pytest.raises(RuntimeError, match="inside a group_commit block cannot be copied"):
            copy.deepcopy(model)
    assert copy.deepcopy(model).predict_one(x) == model.predict_one(x)


def test_copies_of_a_model_draw_from_the_one_budget() -> None:
    """A copy of a model keeps the very accountant it draws from: the copies' fits are
    charged to one total, and the accountant itself cannot leave the process."""
    budget = PrivacyAccountant(epsilon=2.0, delta=1e-5)
    schema = PublicSchema(features={"a": (0.0, 1.0)})
    model = SGBDT(schema, seed=0, task="classification", epsilon=1.0, rounds=2, depth=1,
                  expected_records=200).draw_from(budget, "m")
    X = np.random.default_rng(0).uniform(size=(200, 1))
    y = (X[:, 0] > 0.5).astype(float)
    copies = [copy.deepcopy(model), copy.deepcopy(model), copy.copy(model)]
    assert all(twin.accountant is budget for twin in copies)
    copies[0].fit(X, y)
    copies[1].fit(X, y)
    with pytest.raises(BudgetExceeded):
        copies[2].fit(X, y)
    assert budget.spent_epsilon == pytest.approx(2.0)
    with pytest.raises(LedgerConflict, match="cannot be pickled"):
        pickle.dumps(budget)


def test_keys_whose_records_were_never_merged_have_no_ledger_to_move(tmp_path) -> None:
    """Records after the last trigger are not merged when the engine closes (a source
    re-reads them); their keys are in the store by name only, never charged. A reshard
    leaves them out instead of refusing the store for good, and every charged key moves."""
    path, model = _fed(tmp_path, 60)  # a trigger every 25 positions: 50 merged
    model.engine.close()
    reopened = _model(str(path))
    assert reopened.operator_budget_of("k55").status == "pending"
    charged = {f"k{i}": reopened.operator_budget_of(f"k{i}").spent_rdp for i in range(50)}
    config = reopened.engine.config
    reopened.engine.close()
    targets = [str(tmp_path / f"shard-{k}-of-2.db") for k in range(2)]
    reshard(config, [str(path)], targets)
    shards = [StreamEngine(config, store=SQLiteStore(t), coordinated=True) for t in targets]
    moved = {}
    for shard in shards:
        for key in charged:
            budget = shard.operator_budget_of(key)
            if budget.status != "unknown":
                moved[key] = budget.spent_rdp
        assert shard.operator_budget_of("k55").status == "unknown"
        shard.close()
    assert moved == charged


def test_closing_a_river_model_keeps_the_records_since_its_last_round(tmp_path) -> None:
    """A River stream has no source to re-read: ``close()`` commits the records learned
    after the last trigger (merged, nothing released), so a restart resumes at the same
    position with them, their keys charged like any other; the engine's own ``close()``
    leaves them out. Nothing is released by the close."""
    path, model = _fed(tmp_path, 60)  # a trigger every 25 positions
    version = model.engine.release_version
    model.close()
    model.close()  # idempotent
    reopened = _model(str(path))
    assert reopened.engine.positions == 60
    assert reopened.engine.release_version == version
    assert reopened.operator_budget_of("k55").status == "active"
    _feed(reopened, 15, start=60)  # the next trigger at 75, as without the restart
    assert reopened.engine.release_version > version
    reopened.close()


def test_one_store_object_serves_one_engine_at_a_time(tmp_path) -> None:
    """The store's lock keeps out other processes and other store objects; two models
    handed the same store object once both loaded its ledger and spent it, until the
    second stopped on a UNIQUE constraint at its first round. The second is refused, the
    first goes on, and once it is closed the store object's file opens again."""
    store = SQLiteStore(tmp_path / "s.db", create=True)
    first = _model(store)
    with pytest.raises(LedgerConflict, match="already serves another engine"):
        _model(store)
    _feed(first, 60)  # the refusal left the store open for its engine
    first.close()
    again = _model(str(tmp_path / "s.db"))
    assert again.engine.positions == 60
    again.close()


def test_a_store_created_meanwhile_by_another_process_is_not_created_over(
        tmp_path, monkeypatch) -> None:
    """Two processes creating one path: both may find it absent before either holds the
    lock, and the second then wrote a new identity over the first's ledger. The absence is
    checked again under the lock."""
    path, model = _fed(tmp_path, 60)
    model.close()
    probe = SQLiteStore(path)
    identity = probe.identity
    probe.close()
    real, calls = SQLiteStore._check_absent, []

    def raced(self) -> None:  # the first check ran before the other process created it
        calls.append(1)
        if len(calls) > 1:
            real(self)

    monkeypatch.setattr(SQLiteStore, "_check_absent", raced)
    with pytest.raises(LedgerConflict, match="already exists"):
        SQLiteStore(path, create=True)
    monkeypatch.undo()
    reopened = SQLiteStore(path)
    assert reopened.identity.store_id == identity.store_id  # each open starts an epoch
    reopened.close()


def test_a_store_behind_an_epoch_it_reached_is_refused(tmp_path) -> None:
    """Restoring an older copy of the file (or losing the -wal that held the last commits)
    opened without a word: the keys' spent budgets went back while what they paid for was
    already released. The epoch each open reaches is now recorded beside the file."""
    import shutil

    path, model = _fed(tmp_path, 60)
    model.engine.close()
    shutil.copy(path, tmp_path / "backup.db")  # closed: the WAL is checkpointed
    again = _model(SQLiteStore(path))
    _feed(again, 60, start=60)
    spent = again.operator_budget_of("k3").spent_rdp
    again.engine.close()
    shutil.copy(tmp_path / "backup.db", path)  # the older copy restored over it
    with pytest.raises(LedgerConflict, match="behind epoch"):
        SQLiteStore(path)
    with pytest.raises(LedgerConflict, match="behind epoch"):  # the refusal moved nothing on
        SQLiteStore(path)
    shutil.copy(tmp_path / "backup.db", tmp_path / "elsewhere.db")
    with pytest.raises(LedgerConflict, match="is a copy"):  # at a new path: the original
        SQLiteStore(tmp_path / "elsewhere.db")              # is there
    assert spent > 0


@pytest.mark.parametrize("lost", ["a backup taken while it trained", "the -wal"])
def test_a_store_behind_a_commit_of_its_own_open_is_refused(tmp_path, lost) -> None:
    """The record beside the file once held only the epoch of the last open, so an older
    copy taken during that open (an online backup), or a -wal lost after SQLite had moved
    part of it into the file, opened without a word: versions 10-17 had been released and
    their charges were gone. The record now follows every commit (synchronous=FULL)."""
    import sqlite3

    path, model = _fed(tmp_path, 60)
    version = model.engine.release_version
    if lost == "the -wal":
        model.engine.store._db.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        behind = Path(f"{path}-wal").read_bytes()  # empty: every commit is in the file
        shutil.copy(path, tmp_path / "backup.db")
    else:
        source, copy = sqlite3.connect(path), sqlite3.connect(tmp_path / "backup.db")
        source.backup(copy)  # the online backup API, mid-run
        source.close()
        copy.close()
    _feed(model, 60, start=60)
    assert model.engine.release_version > version
    model.engine.store._db.close()  # a crash: no clean close
    model.engine.store._lock.release()
    shutil.copy(tmp_path / "backup.db", path)
    for suffix in ("-wal", "-shm"):  # the restore, as SQLite's documentation has it
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    if lost == "the -wal":
        assert behind == b""
    with pytest.raises(LedgerConflict, match="behind epoch 1 after"):
        SQLiteStore(path)
    # a store that is not behind opens: the same, not restored, with synchronous=NORMAL too
    for synchronous in ("FULL", "NORMAL"):
        fresh, fed = _fed(tmp_path / synchronous, 60, synchronous=synchronous)
        fed.engine.close()
        SQLiteStore(fresh).close()


def test_a_store_is_not_created_where_a_lost_one_left_its_record(tmp_path) -> None:
    """The record beside a store outlives a file deleted by hand; creating a store there
    gave the lost store's keys fresh budgets. It is refused until the record is deleted,
    and a store discarded by renyiboost leaves nothing behind."""
    path, model = _fed(tmp_path, 30)
    model.engine.close()
    for suffix in ("", "-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerConflict, match="records a state store that was at"):
        SQLiteStore(path, create=True)
    Path(f"{path}.epoch").unlink()
    SQLiteStore(path, create=True).close()


def test_a_discard_stopped_half_way_leaves_a_store_that_opens(tmp_path, monkeypatch) -> None:
    """A discard stopped after its first deletion leaves the empty store, which opens and is
    discarded again; deleting the database first left the record of a store that "is gone",
    refusing every new store at the path (review H #5)."""
    path = str(tmp_path / "empty.db")
    SQLiteStore(path, create=True).close()
    unlink = Path.unlink
    calls: list[str] = []

    def stopped_after_one(self: Path, missing_ok: bool = False) -> None:
        calls.append(self.name)
        if len(calls) > 1:
            raise KeyboardInterrupt  # the process stops here
        unlink(self, missing_ok=missing_ok)

    monkeypatch.setattr(Path, "unlink", stopped_after_one)
    with pytest.raises(KeyboardInterrupt):
        SQLiteStore(path).discard()
    monkeypatch.setattr(Path, "unlink", unlink)
    assert calls[0] == "empty.db.epoch" and Path(path).exists()
    SQLiteStore(path).discard()
    assert sorted(p.name for p in tmp_path.iterdir()) == []
    SQLiteStore(path, create=True).close()


def test_the_record_beside_a_store_is_rewritten_in_place_and_comes_back_if_deleted(
        tmp_path) -> None:
    """The record follows every commit at a fixed width, written in place (a rewrite that
    truncated first cost more than a small commit itself, and left it empty for a moment);
    deleted by hand while the store is open, the next commit writes it again, so an older
    copy restored after that is still refused."""
    import sqlite3

    from renyiboost.stream.store import RECORD_BYTES

    path, model = _fed(tmp_path, 60)
    record = Path(f"{path}.epoch")
    store = model.engine.store

    def recorded() -> dict:
        text = record.read_text()
        assert len(text) == RECORD_BYTES  # one width: no tail of a longer record
        return json.loads(text)

    assert recorded() == {"store_id": store.identity.store_id, "epoch": 1,
                          "commits": store._commits}
    source, copy = sqlite3.connect(path), sqlite3.connect(tmp_path / "backup.db")
    source.backup(copy)  # an older copy, taken online
    source.close()
    copy.close()
    record.unlink()
    _feed(model, 60, start=60)
    model.engine.wait_durable()  # the last round's write-behind commit (once read mid-way)
    assert recorded()["commits"] == store._commits > 0
    model.engine.close()
    shutil.copy(tmp_path / "backup.db", path)
    for suffix in ("-wal", "-shm"):
        Path(f"{path}{suffix}").unlink(missing_ok=True)
    with pytest.raises(LedgerConflict, match="behind epoch"):
        SQLiteStore(path)


def test_a_crash_while_the_first_load_pins_the_configuration_pins_nothing(tmp_path,
                                                                         monkeypatch) -> None:
    """The configuration, calibration and charge-grid rows were written one by one: a
    crash between two left a store that refused its own arguments for good ("created with
    a different calibration"). They are one transaction now: all or none."""
    from renyiboost.stream.store import SQLStateStore

    path = tmp_path / "s.db"
    SQLiteStore(path, create=True).close()
    execute = SQLStateStore._execute

    def dying(self, statement, parameters=()):
        if statement.startswith("INSERT INTO meta") and parameters[:1] == ("calibration",):
            raise KeyboardInterrupt("killed between two pinned rows")
        return execute(self, statement, parameters)

    monkeypatch.setattr(SQLStateStore, "_execute", dying)
    with pytest.raises(KeyboardInterrupt):
        _model(SQLiteStore(path))
    monkeypatch.undo()
    again = _model(SQLiteStore(path))
    _feed(again, 30)
    again.engine.close()
