"""``make mutants``: hand-written privacy mutations that the test suite must catch.

Each mutation is a small, plausible bug that breaks the guarantee: less noise, a record
charged too little or not at all, a count in the public release, a schedule that reads the
pool, a second ledger. For each, the source tree is copied to a temporary directory, the
mutation applied there (never in the working tree), and the named tests run against the
copy; the mutation must make them fail. Exit code 1 if any mutation survives.

Run: ``python tests/mutants.py`` (``make mutants``; also part of ``.ci/run``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PRIVACY = ["tests/test_privacy.py"]
LEDGER = ["tests/test_ledger.py"]
DEFAULTS = ["tests/test_defaults.py"]
KERNELS = ["tests/test_kernels.py"]
STAGES = ["tests/test_stages.py"]
POSTGRES = ["tests/test_postgres_store.py"]
SHARDED = ["tests/test_sharded.py"]
RAY_REFUSALS = [
    "tests/test_ray_shards.py::test_a_changed_partition_map_or_a_second_coordinator_is_refused"]
RAY_KILLS = ["tests/test_ray_shards.py::test_killed_shard_processes_lose_and_repeat_nothing"]
RESHARD = "tests/test_reshard.py::test_"
DPBOOST = ["tests/test_dpboost.py"]
MULTICLASS = ["tests/test_multiclass.py"]
FEDXGB = ["tests/test_fedxgboost.py"]
SPLIT_GRID = ["tests/test_split_grid.py"]
RECALIBRATION = ["tests/test_recalibration.py"]
WRITE_BEHIND = [
    "tests/test_stream.py::test_write_behind_keeps_a_round_invisible_until_its_commit_returns"]


@dataclass(frozen=True)
class Mutation:
    name: str
    path: str
    old: str
    new: str
    tests: list[str]
    #: Further ``(path, old, new)`` edits of the same bug (e.g. both of two guards).
    also: tuple[tuple[str, str, str], ...] = ()


MUTATIONS = [
    Mutation("gradient-sum noise x 0.1", "src/renyiboost/models/booster.py",
             "sum_std = release.sum_noise_std(params.grad_clip)",
             "sum_std = 0.1 * release.sum_noise_std(params.grad_clip)", PRIVACY),
    Mutation("count noise x 0.1", "src/renyiboost/models/booster.py",
             "den_sum, release.count_noise_std(self.count_sensitivity))",
             "den_sum, 0.1 * release.count_noise_std(self.count_sensitivity))", PRIVACY),
    Mutation("initial score without its sum noise", "src/renyiboost/models/booster.py",
             "total = float(self.noise.add_gaussian(total, init.sum_noise_std(1.0)))",
             "total = float(total)", PRIVACY),
    Mutation("a stream's initial score without its noise", "src/renyiboost/models/booster.py",
             "total = float(self.noise.add_gaussian(total, init.lone_sum_noise_std(1.0)))",
             "total = float(total)", PRIVACY),
    Mutation("a stream's initial score with 0.7 of its noise", "src/renyiboost/accounting/leaf.py",
             "return grad_clip * self.sigma / math.sqrt(2.0)",
             "return grad_clip * self.sigma / 2.0", PRIVACY),
    Mutation("initial score charges nobody (batch)", "src/renyiboost/models/booster.py",
             "spent[active] = charged_many(spent[active], cal.init_charge)\n"
             "        if public_count is not None and cal",
             "pass\n        if public_count is not None and cal", PRIVACY),
    Mutation("initial score charges nobody (stream)", "src/renyiboost/stream/engine.py",
             "np.where(pool.retired, pool.spent, charged_many(pool.spent, event.charge))",
             "pool.spent",
             PRIVACY),
    Mutation("only Poisson-sampled records are charged", "src/renyiboost/models/kernels.py",
             "spent_out[i] = after\n",
             "spent_out[i] = after if sampling_rate >= 1.0 or uniforms[k] < sampling_rate "
             "else spent[i]\n", PRIVACY),
    Mutation("only Poisson-sampled records are charged (numpy reference)",
             "src/renyiboost/models/booster.py",
             "                              if sample else False)\n",
             "                              if sample else False)\n"
             "        spent[active] = np.where(sampled, spent[active], pool.spent[active])\n",
             KERNELS),
    Mutation("charge table rounds s^2 down", "src/renyiboost/accounting/filter.py",
             "np.ceil(s2 * self.resolution)", "np.floor(s2 * self.resolution)", PRIVACY,
             also=(("src/renyiboost/accounting/filter.py", "math.ceil(s2 * resolution)",
                    "math.floor(s2 * resolution)"),)),
    Mutation("eligibility lets a record overspend", "src/renyiboost/accounting/filter.py",
             "return charged_many(spent, charge) <= self.budget_rdp",
             "return charged_many(spent, charge) <= 2 * self.budget_rdp",
             ["tests/test_accounting.py", *PRIVACY],
             also=(("src/renyiboost/accounting/filter.py",
                    "return total <= budget", "return total <= 2 * budget"),)),
    Mutation("spent budgets add rounding to nearest", "src/renyiboost/accounting/filter.py",
             "return np.nextafter(total, np.inf) if error > 0.0 else total",
             "return total", ["tests/test_accounting_guards.py"],
             also=(("src/renyiboost/accounting/filter.py",
                    "return np.where(error > 0.0, np.nextafter(total, np.inf), total)",
                    "return total"),)),
    Mutation("the compiled round admits a record of NaN or infinite s²",
             "src/renyiboost/accounting/filter.py",
             "    return charged(spent + 0.0 * sensitivity2, charge)",
             "    return charged(spent, charge)", ["tests/test_accounting_guards.py"]),
    Mutation("a restore accepts a replay whose charges differ",
             "src/renyiboost/stream/engine.py",
             "if outcome.codes_digest != event.codes_digest:", "if False:",
             ["tests/test_stream.py"]),
    Mutation("the compiled router sends NaN left", "src/renyiboost/models/predict_kernels.py",
             "return (c & U(x == threshold)) | ((U(1) - c) & U(x < threshold))",
             "return (c & U(x == threshold)) | ((U(1) - c) & U(not x >= threshold))",
             ["tests/test_predict_kernels.py"]),
    Mutation("no charge floor (Newton leaves never retire)", "src/renyiboost/models/booster.py",
             "max(natural_min, params.min_sensitivity2)", "max(natural_min, 1e-12)", PRIVACY),
    Mutation("a count in the public release", "src/renyiboost/stream/engine.py",
             "        return model_release(self.config, self.booster,",
             "        return model_release(self.config.model_copy(update={\"max_trees\": "
             "self.config.max_trees or len(self._keys)}), self.booster,", PRIVACY),
    Mutation("a round is skipped when nobody is eligible", "src/renyiboost/stream/engine.py",
             "        max_trees = self.config.max_trees\n        n_trees = self.booster.ensemble",
             "        if outcome.n_eligible == 0:\n            return\n"
             "        max_trees = self.config.max_trees\n        n_trees = self.booster.ensemble",
             PRIVACY),
    Mutation("the warm-up counts pooled records", "src/renyiboost/stream/engine.py",
             "if self._positions < self.config.warmup:",
             "if len(self.pool) < self.config.warmup:", PRIVACY),
    Mutation("polled shards read their share rounded up (rounds pass their trigger)",
             "src/renyiboost/stream/sharded.py",
             "caps = [base + int((k - self._turn) % n < extra) for k in range(n)]",
             "caps = [base + int(extra > 0) for k in range(n)]",
             [SHARDED[0] + "::test_polled_rounds_run_at_their_triggers_whoever_has_events_"
              + "ready"]),
    Mutation("idle polled shards wait at every step, not once a turn",
             "src/renyiboost/stream/sharded.py",
             "wait = None if idle and self._empty_steps % turn == 0 else 0.0",
             "wait = None if idle else 0.0",
             [SHARDED[0] + "::test_a_shard_with_events_is_not_kept_waiting_behind_idle_ones"]),
    Mutation("a coordinator goes on after a shard's commit failed",
             "src/renyiboost/stream/sharded.py",
             "    def _stop_on(self, error: BaseException) -> None:\n        self._broken = error",
             "    def _stop_on(self, error: BaseException) -> None:\n        pass",
             [SHARDED[0] + "::test_a_failed_commit_stops_the_coordinator_until_a_restart_"
              + "reconciles"]),
    Mutation("a batch's retired records are not stream positions",
             "src/renyiboost/stream/engine.py", "            self._count_positions(stop - start)",
             "            self._count_positions(stop - start - (\n"
             "                row_stop - row - int(live.sum()) if row_stop > row else 0))",
             ["tests/test_stream.py::test_retired_keys_are_dropped_and_counted"]),
    Mutation("invalid records are not stream positions", "src/renyiboost/models/estimators.py",
             "                engine.empty_event()\n                raise", "                raise",
             PRIVACY),
    Mutation("a batch fit stops when nobody is eligible", "src/renyiboost/models/batch.py",
             "            booster.apply_round(pool, outcome)",
             "            if outcome.n_eligible == 0:\n                break\n"
             "            booster.apply_round(pool, outcome)", PRIVACY),
    Mutation("a retired key is re-admitted", "src/renyiboost/stream/engine.py",
             "        live = self._status[uids] != RETIRED\n",
             "        live = np.ones(uids.size, dtype=bool)\n", ["tests/test_stream.py"],
             also=(("src/renyiboost/stream/engine.py", "if self._status[uid] == RETIRED:",
                    "if False:"),)),
    Mutation("a missing state file becomes a new store", "src/renyiboost/stream/store.py",
             "    return SQLiteStore(location, create=create, continues=continues, meta=meta)\n",
             "    return SQLiteStore(location, create=create or not Path(str(location)).exists(),"
             " continues=continues, meta=meta)\n",
             LEDGER),
    Mutation("a missing PostgreSQL store becomes a new one", "src/renyiboost/stream/postgres.py",
             '                raise StoreNotFound(f"no state store at {self.location}. '
             '{NEVER_IMPLICIT}")\n',
             "                create = True\n                self._check_absent()\n", POSTGRES),
    Mutation("shards send sums before their records are committed",
             "src/renyiboost/stream/sharded.py",
             "        self.engine.flush()\n        return self.engine.shard_sums(",
             "        return self.engine.shard_sums(", SHARDED),
    Mutation("a shard behind is not brought to the round the others committed",
             "src/renyiboost/stream/sharded.py", "            if behind == 1:",
             "            if False:", SHARDED),
    Mutation("a shard brought forward charges the round at the main stage",
             "src/renyiboost/stream/sharded.py",
             "        stage = noise_stage_at(self.config, positions)\n",
             "        stage = None\n", SHARDED),
    Mutation("a sharded tree joins the model before every shard's commit is durable",
             "src/renyiboost/stream/sharded.py",
             "        self.engine.install_released(tree, stage)\n        self.engine.wait_durable()",
             "        self.engine.install_released(tree, stage)", SHARDED),
    Mutation("a changed partition map is accepted", "src/renyiboost/connectors/kafka.py",
             "        pin_meta(store, \"partition_map\", mapping, lambda recorded: (",
             "        (lambda *_: None)(store, \"partition_map\", mapping, lambda recorded: (",
             RAY_REFUSALS),
    Mutation("a shard restarted by Ray is not reconciled", "src/renyiboost/stream/sharded.py",
             "                self._reconcile()\n                return\n",
             "                return\n", RAY_KILLS),
    Mutation("a failed Ray start kills the shards that opened with their stores open",
             "src/renyiboost/stream/ray_shards.py",
             "            self._close_opened([", "            ([",
             ["tests/test_ray_shards.py::test_a_failed_start_closes_the_shards_that_opened"]),
    Mutation("no lock on the PostgreSQL store", "src/renyiboost/stream/postgres.py",
             "            self._lock()\n", "            pass\n", POSTGRES),
    Mutation("a closed PostgreSQL store leaves its lock to the server's exit",
             "src/renyiboost/stream/postgres.py", "        if self._locked:\n",
             "        if False:\n",
             [("tests/test_postgres_store.py::test_a_closed_store_has_released_its_lock_when_"
               "close_returns")]),
    Mutation("a restarted trainer is refused its dead predecessor's PostgreSQL lock",
             "src/renyiboost/stream/postgres.py", "DEAD_HOLDER_WAIT = 30.0",
             "DEAD_HOLDER_WAIT = 0.0",
             [("tests/test_postgres_store.py::test_a_dead_holders_lock_is_waited_for_and_a_"
               "live_ones_refused_at_once")]),
    Mutation("a batch prediction takes what is not a category code as 'other'",
             "src/renyiboost/schema.py", "        if not bad.any():\n            return\n",
             "        if True:\n            return\n",
             ["tests/test_input_checks.py::test_a_batch_model_refuses_what_is_not_a_category_code"]),
    Mutation("a bool in a categorical column is taken as a code",
             "src/renyiboost/schema.py", "        if flagged:\n            name = self.names",
             "        if False:\n            name = self.names",
             [("tests/test_input_checks.py::test_pandas_missing_values_are_missing_and_bool_"
               "codes_are_refused")]),
    Mutation("a batch prediction reads a Series by position", "src/renyiboost/schema.py",
             "        if one_row and hasattr(X, \"to_frame\")",
             "        if False and hasattr(X, \"to_frame\")",
             ["tests/test_input_checks.py::test_a_batch_model_reads_series_labels_lists_and_dates_as_they_are_meant"]),
    Mutation("frame labels that are not strings are taken by position",
             "src/renyiboost/schema.py",
             "            if labels == list(range(len(labels))) or",
             "            if True or",
             ["tests/test_input_checks.py::test_a_batch_model_reads_series_labels_lists_and_dates_as_they_are_meant"]),
    Mutation("labels are paired with rows by position whatever y's index",
             "src/renyiboost/validation.py",
             "    if any(not index.equals(indexes[0]) for index in indexes[1:]):",
             "    if False:",
             ["tests/test_input_checks.py::test_a_batch_model_reads_series_labels_lists_and_dates_as_they_are_meant",
              "tests/test_input_checks.py::test_encode_columns_and_the_stream_refuse_dates_and_take_pandas_na"]),
    Mutation("a date column is read as numbers by the stream", "src/renyiboost/validation.py",
             "            if values.dtype.kind in \"mM\":", "            if False:",
             ["tests/test_input_checks.py::test_encode_columns_and_the_stream_refuse_dates_and_take_pandas_na"]),
    Mutation("a numpy duration is a real number", "src/renyiboost/validation.py",
             "and not isinstance(value, bool | np.bool_ | DATE_SCALARS))",
             "and not isinstance(value, bool | np.bool_))",
             ["tests/test_input_checks.py::test_encode_columns_and_the_stream_refuse_dates_and_take_pandas_na"]),
    Mutation("a numpy duration is an integer category", "src/renyiboost/validation.py",
             "                    value, DATE_SCALARS):", "                    value, ()):",
             [("tests/test_input_checks.py::test_encode_columns_and_the_stream_refuse_dates_"
               "and_take_pandas_na")]),
    Mutation("a duration in an object array is read as a number", "src/renyiboost/schema.py",
             'raise TypeError("a date or duration is no number")',
             'pass  # raise TypeError("a date or duration is no number")',
             [("tests/test_input_checks.py::test_a_batch_model_reads_series_labels_lists_"
               "and_dates_as_they_are_meant")]),
    Mutation("a hint within the warmup gets a burst after every key is spent",
             "src/renyiboost/models/defaults.py",
             "all_at_end is None else all_at_end:\n        share = 0.0",
             "all_at_end is None else all_at_end:\n        share = share",
             ["tests/test_defaults.py::test_a_size_hint_adds_a_burst_at_the_expected_end"]),
    Mutation("finish() at a small hint's end runs a burst after every key is spent",
             "src/renyiboost/stream/engine.py",
             "                                         or config.warmup >= config.final_at):",
             "                                         or False):",
             ["tests/test_config_checks.py::test_a_hint_below_the_warmup_still_trains_at_its_end"]),
    Mutation("a clone of a learned model says nothing of its second ledger",
             "src/renyiboost/models/estimators.py",
             "        elif self._engine.positions and new._engine.may_learn",
             "        elif False and new._engine.may_learn",
             [("tests/test_budget.py::test_a_river_clone_of_a_model_that_learned_warns_of_a_"
               "second_ledger")]),
    Mutation("a PostgreSQL server without fsync is accepted", "src/renyiboost/stream/postgres.py",
             'if fsync != "on":', "if False:", POSTGRES),
    Mutation("no lock on the state file", "src/renyiboost/stream/store.py",
             "fcntl.flock(self._file, fcntl.LOCK_EX | fcntl.LOCK_NB)", "pass", LEDGER),
    Mutation("a changed calibration is accepted", "src/renyiboost/stream/store.py",
             "            if held != given:", "            if False:",
             LEDGER),
    Mutation("an older store's default overrides a field the store holds",
             "src/renyiboost/stream/store.py",
             "filled | {key: value for key, value in absent.items() if key not in filled}",
             "filled | dict(absent)",
             ["tests/test_stream.py", "-k", "store_from_before_a_learner_field"]),
    Mutation("a restarted finish() runs a second burst", "src/renyiboost/stream/engine.py",
             'if recorded is not None and recorded["at"] == positions:', "if False:",
             ["tests/test_stream.py", "tests/test_sharded.py", "-k", "finish"]),
    Mutation("a reshard drops the finish() record (a second burst after it)",
             "src/renyiboost/stream/reshard.py",
             "            if side[0][FINISH_META] is not None:", "            if False:",
             ["tests/test_reshard.py", "-k", "finish"]),
    Mutation("λ is not raised by the leaf denominator's noise",
             "src/renyiboost/models/booster.py",
             "if release is None or params.reg_lambda_noise_stds == 0:", "if True:",
             ["tests/test_models.py", "-k", "lambda_rises"]),
    Mutation("an unknown feature is silently ignored", "src/renyiboost/validation.py",
             "            if encoder is None:\n                encoder = self._renamed(name, x)\n",
             "            if encoder is None:\n                continue\n", ["tests/test_stream.py"]),
    Mutation("keys are not NFC-normalised", "src/renyiboost/validation.py",
             'name = unicodedata.normalize("NFC", name)', "pass", LEDGER),
    Mutation("the size estimate reads the exact row count", "src/renyiboost/models/batch.py",
             "float(noise.add_laplace(y.size, split.laplace_scale))", "float(y.size)",
             DEFAULTS),
    Mutation("the size estimate's epsilon is left out of the guarantee",
             "src/renyiboost/release.py", "extra = size_estimate_epsilon or 0.0",
             "extra = 0.0", DEFAULTS),
    Mutation("merged leaves get the noise of one fine leaf split four ways",
             "src/renyiboost/models/booster.py",
             "sum_std = release.sum_noise_std(params.grad_clip)",
             "sum_std = release.sum_noise_std(params.grad_clip) / 2**shift", DEFAULTS),
    Mutation("the selection leaves out the log of its expected runs",
             "src/renyiboost/accounting/selection.py", "log_mean = math.log(mean_runs)",
             "log_mean = 0.0", DEFAULTS),
    Mutation("a private selection's score gets half the noise",
             "src/renyiboost/models/tuning.py",
             "return math.sqrt(budget.order / (2.0 * budget.run_rdp))",
             "return 0.5 * math.sqrt(budget.order / (2.0 * budget.run_rdp))", DEFAULTS),
    Mutation("a private selection warns once a run (the log counts K)",
             "src/renyiboost/models/tuning.py", 'warnings.simplefilter("ignore")', "pass",
             [DEFAULTS[0] + "::test_a_private_selection_does_not_count_its_runs_into_warnings"]),
    Mutation("a private selection runs twice as often as accounted",
             "src/renyiboost/models/tuning.py", "gamma = 1.0 / mean_runs",
             "gamma = 0.5 / mean_runs", DEFAULTS),
    Mutation("a stream's leaf depth reads the pool, not the positions",
             "src/renyiboost/stream/engine.py",
             "return leaf_depth_at(self.config, self.booster, self._positions, stage)",
             "return leaf_depth_at(self.config, self.booster, len(self.pool), stage)", PRIVACY),
    Mutation("a stage round charges at the main stage's table",
             "src/renyiboost/models/booster.py",
             "flt = stage.filter if stage is not None else None", "flt = self.filter", STAGES,
             also=(("src/renyiboost/models/booster.py", "step = stage.filter.step(",
                    "step = self.filter.step("),)),
    Mutation("every round gets the least noise of any stage",
             "src/renyiboost/models/booster.py",
             "None if noise_stage is None else noise_stage.release)",
             "self.stages[0].release if self.stages else None)", STAGES),
    Mutation("a round's noise stage reads the pool, not the positions",
             "src/renyiboost/stream/engine.py",
             "return noise_stage_at(self.config, self._positions)",
             "return noise_stage_at(self.config, len(self.pool))", STAGES),
    Mutation("a replay recomputes every round at the main stage",
             "src/renyiboost/stream/engine.py",
             "event.leaves.reshape(self.booster.ensemble.leaf_shape), event.stage)",
             "event.leaves.reshape(self.booster.ensemble.leaf_shape), None)",
             STAGES),
    Mutation("a store whose ledgers were resharded away trains again",
             "src/renyiboost/stream/engine.py", '    moved = store.get_meta("resharded")\n',
             "    moved = None\n", [f"{RESHARD}the_old_stores_are_refused_for_good"]),
    Mutation("a reshard leaves the retired keys behind (a fresh budget each)",
             "src/renyiboost/stream/engine.py",
             "retired = np.flatnonzero(self._status[: self._next_uid] == RETIRED)",
             "retired = np.zeros(0, dtype=np.int64)",
             [f"{RESHARD}every_ledger_moves_to_its_new_shard_exactly"]),
    Mutation("new stores train before every old store is tombstoned",
             "src/renyiboost/stream/reshard.py",
             '                "reshard_pending": pending,\n', "",
             [f"{RESHARD}an_interrupted_reshard_is_redone_or_finished"]),
    Mutation("a reshard moves a Kafka key by its hash, not its partition",
             "src/renyiboost/stream/reshard.py",
             "owners[known] = np.array([mine[origin] for origin in origins])[inverse]",
             "owners[known] = [shard_of(name, n_new) for name in keys.names[known]]",
             [f"{RESHARD}a_kafka_deployment_reshards_and_trains_on[sqlite]"]),
    Mutation("DPBoost's gain sensitivity as the paper's Lemma 1 states it",
             "src/renyiboost/accounting/dpboost.py", "    return 3.0 * g_star**2\n",
             "    return (3 * 0.1 + 2) / ((2 + 0.1) * (1 + 0.1)) * g_star**2\n", DPBOOST),
    Mutation("DPBoost's leaves noised at the whole ensemble's ε",
             "src/renyiboost/models/dpboost.py",
             "scale = sensitivity / self.budget.leaf_epsilon",
             "scale = sensitivity / self.budget.ensemble_epsilon", DPBOOST),
    Mutation("DPBoost trains on rows whose gradient exceeds g*",
             "src/renyiboost/models/dpboost.py",
             "used = mine & (np.abs(grad) <= G_STAR)", "used = mine", DPBOOST),
    Mutation("gridless DPBoost weighs the intervals between rows alike",
             "src/renyiboost/models/dpboost.py",
             "log_w = log_lengths(low, high) - self.log_k - np.log(hi - lo)",
             "log_w = np.where(high > low, 0.0, -np.inf) - self.log_k", DPBOOST),
    Mutation("the additive learner accounts one tree an epoch, not one a feature",
             "src/renyiboost/models/additive.py",
             "n_trees = params.rounds * n_features", "n_trees = params.rounds",
             ["tests/test_additive.py"]),
    Mutation("the additive learner's count histograms get a tenth of their noise",
             "src/renyiboost/models/additive.py",
             "                                     self.noise.count_sigma)",
             "                                     self.noise.count_sigma / 10)",
             ["tests/test_additive.py"]),
    Mutation("the additive learner's leaf noise ignores the gradient clip",
             "src/renyiboost/models/additive.py",
             "self.noise.tree_sigma * params.grad_clip)", "self.noise.tree_sigma)",
             ["tests/test_additive.py"]),
    Mutation("DiPriMe charges its K candidate medians once a level (the authors' code)",
             "src/renyiboost/accounting/diprime.py",
             "self.epsilon * self.split_share / (self.depth * (self.candidates + 1))",
             "self.epsilon * self.split_share / (self.depth * 2)", ["tests/test_diprime.py"]),
    Mutation("released noisy values are not rounded to their grid (floating-point attack)",
             "src/renyiboost/randomness.py",
             "return (np.round(values / grid) * grid + 0.0 if grid > 0",
             "return (values if grid > 0", ["tests/test_randomness.py"]),
    Mutation("the dense uniforms' exponent skips its second word",
             "src/renyiboost/randomness.py",
             "            k += 64\n            bits = low\n",
             "            k += 64\n            bits = np.uint64(0)\n", ["tests/test_randomness.py"]),
    Mutation("DiPriMe's regression leaves get half their noise",
             "src/renyiboost/models/diprime.py",
             "            sums = noise.add_laplace(sums, 2.0 / epsilon)\n",
             "            sums = noise.add_laplace(sums, 1.0 / epsilon)\n",
             ["tests/test_diprime.py"]),
    Mutation("every DiPriMe tree trains on every row",
             "src/renyiboost/models/diprime.py", "            mine = tree_of_row == t\n",
             "            mine = tree_of_row >= 0\n", ["tests/test_diprime.py"]),
    Mutation("a listener's exception loses the merges of the next commit",
             "src/renyiboost/stream/engine.py",
             "        self._drain()  # announcements first: a listener that raises leaves nothing "
             "half-built\n", "",
             ["tests/test_stream.py::test_a_listener_that_raises_leaves_the_ledger_whole"],
             also=(("src/renyiboost/stream/engine.py",
                    "        if self._n_pending:\n            self._drain()\n", ""),)),
    Mutation("write-behind announces a round before its commit returns",
             "src/renyiboost/stream/engine.py", "                flight.done.result()\n",
             "                flight.done.done()\n", WRITE_BEHIND),
    Mutation("predictions do not wait for the commit in flight",
             "src/renyiboost/stream/engine.py",
             "(\"a prediction\")\n        self.wait_durable()\n        return self._predict(X)",
             "(\"a prediction\")\n        return self._predict(X)", WRITE_BEHIND),
    Mutation("a second reader skips the wait for the commit in flight",
             "src/renyiboost/stream/engine.py",
             "            flight = self._in_flight\n            if flight is None:\n",
             "            flight, self._in_flight = self._in_flight, None\n"
             "            if flight is None:\n", WRITE_BEHIND),
    Mutation("a multiclass record is charged by its largest class gradient, not the L2 norm",
             "src/renyiboost/models/losses.py",
             "return LeafStatistics(grad, np.ones(grad.shape[0]), 1.0, clipped / self.grad_clip)",
             "return LeafStatistics(grad, np.ones(grad.shape[0]), 1.0,\n"
             "                              np.abs(grad).max(axis=1) / self.grad_clip)",
             MULTICLASS),
    Mutation("vector leaves split a scalar sum's noise over the classes",
             "src/renyiboost/models/booster.py",
             "sum_std = release.sum_noise_std(params.grad_clip)",
             "sum_std = release.sum_noise_std(params.grad_clip) / (\n"
             "                    grad_sum.shape[1] ** 0.5 if grad_sum.ndim == 2 else 1.0)",
             MULTICLASS),
    Mutation("the multiclass initial histogram charges nobody", "src/renyiboost/models/booster.py",
             "            spent[active] = charged_many(spent[active], cal.init_charge)\n"
             "            noise_std = LeafRelease(",
             "            noise_std = LeafRelease(", MULTICLASS),
    Mutation("FedXGBoost-LDP reports at the whole epsilon every round",
             "src/renyiboost/models/fedxgboost.py",
             "reports = randomise(grad, params.randomiser, self.budget.round_epsilon,",
             "reports = randomise(grad, params.randomiser, params.epsilon,", FEDXGB),
    Mutation("FedXGBoost-LDP scores splits with the paper's biased squares",
             "src/renyiboost/accounting/ldp.py",
             "** 2 - np.asarray(count, dtype=float) * variance", "** 2", FEDXGB),
    Mutation("a DiPriMe categorical median counts a node's missing values in the next node",
             "src/renyiboost/models/diprime.py",
             "flat = pos * (codes.size + 1) + np.where(", "flat = pos * codes.size + np.where(",
             ["tests/test_diprime.py"]),
    Mutation("a batch fit spends without drawing from the shared budget",
             "src/renyiboost/models/batch.py",
             "        self._draw_budget()  # before any record is read by a mechanism\n", "",
             ["tests/test_budget.py"]),
    Mutation("the split grid's histograms with a tenth of their noise",
             "src/renyiboost/models/booster.py",
             "self.schema.n_numeric).count_noise_std\n",
             "self.schema.n_numeric).count_noise_std * 0.1\n", SPLIT_GRID),
    Mutation("the split grid charges nobody", "src/renyiboost/models/booster.py",
             "spent[active] = charged_many(spent[active], self.calibration.grid_charge)\n",
             "pass\n", SPLIT_GRID),
    Mutation("the split grid's charge left out of the budget",
             "src/renyiboost/accounting/calibration.py",
             "budget = (trees_rdp + init_charge + grid_charge) * (1.0 + BUDGET_SLACK)",
             "budget = (trees_rdp + init_charge) * (1.0 + BUDGET_SLACK)", SPLIT_GRID),
    Mutation("a stream's grid charges records that cannot afford it",
             "src/renyiboost/stream/engine.py",
             "return ~pool.retired & budget_filter.affords(pool.spent, charge)",
             "return ~pool.retired",
             SPLIT_GRID),
    Mutation("a restore installs the stream's grid without its charges",
             "src/renyiboost/stream/engine.py",
             "self._install(event, self._grid_state(event))", "self._install(event, self.pool)",
             SPLIT_GRID),
    Mutation("an unhinted stream's end buys its grid at a tenth of its share of B",
             "src/renyiboost/accounting/calibration.py",
             "return share * self.budget_rdp\n", "return share * self.budget_rdp * 0.1\n",
             SPLIT_GRID),
    Mutation("a restarted end buys a second grid", "src/renyiboost/stream/engine.py",
             '"the model has its grid already": booster.grower.quantile_map is not None,',
             '"the model has its grid already": False,', SPLIT_GRID),
    Mutation("a shard that missed the grid's commit is not charged when reconciled",
             "src/renyiboost/stream/sharded.py",
             'self.shards.one(k, "commit_grid", event)', "pass", ["tests/test_sharded.py"]),
    Mutation("each shard's histograms get their own noise", "src/renyiboost/stream/sharded.py",
             'counts = functools.reduce(np.add, self.shards.all("grid_counts", charge))',
             'counts = functools.reduce(np.add, [c + self.booster.noise.normal(c.size, 10.0)'
             '.reshape(c.shape) for c in self.shards.all("grid_counts", charge)])',
             ["tests/test_sharded.py"]),
    Mutation("a reshard leaves the grid behind", "src/renyiboost/stream/reshard.py",
             "counters=counters, grid=first.grid,", "counters=counters,",
             ["tests/test_reshard.py"]),
    Mutation("a reshard drops the open window's sums", "src/renyiboost/stream/reshard.py",
             "sums += export.recalibration.sums", "pass", RECALIBRATION),
    Mutation("the recalibration's sums get a tenth of their noise",
             "src/renyiboost/accounting/platt.py",
             "return self.noise_multiplier * platt_sensitivities(self.margin_clip)",
             "return self.noise_multiplier * platt_sensitivities(self.margin_clip) * 0.1",
             RECALIBRATION),
    Mutation("the recalibration's noise is priced at four times what a key pays",
             "src/renyiboost/models/recalibration.py",
             "return PlattSumsRelease(merge_charge(policy, calibration), calibration.order,",
             "return PlattSumsRelease(4 * merge_charge(policy, calibration), calibration.order,",
             RECALIBRATION),
    Mutation("keys merged in an open window pay nothing", "src/renyiboost/stream/engine.py",
             "spent=np.concatenate([pool.spent, np.full(n_new, event.charge)]),",
             "spent=np.concatenate([pool.spent, np.zeros(n_new)]),", RECALIBRATION),
    Mutation("an upserted key adds to the window's sums again",
             "src/renyiboost/stream/engine.py",
             "new = self._slot[uids] < 0\n", "new = np.ones(uids.size, dtype=bool)\n",
             RECALIBRATION),
    Mutation("the recalibration's margins are not clipped",
             "src/renyiboost/models/recalibration.py",
             "m = np.clip(np.asarray(margin, dtype=np.float64).reshape(-1), -margin_clip, "
             "margin_clip)", "m = np.asarray(margin, dtype=np.float64).reshape(-1)",
             RECALIBRATION),
    Mutation("a replayed merge forgets its keys' recalibration charge",
             "src/renyiboost/stream/store.py", 'float(info.get("charge", 0.0)))', "0.0)",
             RECALIBRATION),
    Mutation("a shard that missed a refit's commit keeps its spent sums",
             "src/renyiboost/stream/sharded.py",
             'self.shards.one(k, "commit_recalibration", done)', "pass", RECALIBRATION),
    Mutation("each shard's recalibration sums get their own noise",
             "src/renyiboost/stream/sharded.py",
             'total = functools.reduce(np.add, self.shards.all("recalibration_sums"))',
             'total = functools.reduce(np.add, [s + self.booster.noise.normal(5, 50.0) for s '
             'in self.shards.all("recalibration_sums")])', RECALIBRATION),
    Mutation("the rounds of a trigger after an end are not owed after a crash",
             "src/renyiboost/stream/engine.py",
             'if finish is not None and "unscheduled" in finish:', "if False:",
             [("tests/test_sharded.py::test_a_crash_inside_a_trigger_after_an_end_owes_"
               "its_rounds_too"),
              ("tests/test_stream.py::test_a_crash_inside_a_trigger_after_an_end_still_"
               "owes_its_rounds")]),
    Mutation("a lagging publisher labels old versions with the newest post-processing",
             "src/renyiboost/stream/engine.py",
             "smoothing_spans=spans, answer_map=recalibration.answer_map_at(version),",
             "smoothing_spans=spans, answer_map=ens.answer_map,",
             [("tests/test_recalibration.py::test_a_version_is_released_as_it_was_answered_"
               "however_late_it_is_published")]),
    Mutation("the recalibration opens only in a merge that carries records",
             "src/renyiboost/stream/engine.py",
             "        self._open_recalibration_when_due()\n        if not self._n_pending:\n"
             "            return\n",
             "        if not self._n_pending:\n            return\n"
             "        self._open_recalibration_when_due()\n",
             [f"{RECALIBRATION[0]}::test_the_opening_reads_positions_not_who_is_in_the_merge"]),
    Mutation("a copy of a model that learned may learn", "src/renyiboost/stream/engine.py",
             "self._copied_ledger = bool(self._positions or self._next_uid)",
             "self._copied_ledger = False",
             [f"{LEDGER[0]}::test_a_copy_of_a_model_that_learned_answers_but_never_learns"]),
    Mutation("copies of a model get their own budget", "src/renyiboost/accounting/budget.py",
             "    def __deepcopy__(self, memo: dict[int, Any]) -> PrivacyAccountant:\n"
             "        return self\n",
             "", ["tests/test_ledger.py::test_copies_of_a_model_draw_from_the_one_budget"]),
    Mutation("a single engine opens a shard's store", "src/renyiboost/stream/engine.py",
             "                claim_single_place(self._store)\n", "                pass\n",
             SHARDED),
    Mutation("two engines share one store object", "src/renyiboost/stream/engine.py",
             "        self._store.claim(self)  # before the try", "        pass  # before the try",
             ["tests/test_ledger.py::test_one_store_object_serves_one_engine_at_a_time"]),
    Mutation("a stage's filter retires what a later stage admits",
             "src/renyiboost/accounting/filter.py",
             "*(float(later.charges(floor)[0]) for later in later_tables)])",
             "])", STAGES),
    Mutation("private tuning reports its number of runs", "src/renyiboost/models/tuning.py",
             '"seeded_for_testing": self.seeded_for_testing}',
             '"seeded_for_testing": self.seeded_for_testing, "runs": self.operator_runs}',
             ["tests/test_defaults.py::test_the_cli_runs_a_private_selection"]),
    Mutation("a tuned model states its run's epsilon", "src/renyiboost/models/tuning.py",
             "    model.stated_guarantee = model.privacy_guarantee().model_copy(",
             "    _unused = model.privacy_guarantee().model_copy(",
             [("tests/test_defaults.py::test_a_private_selection_releases_one_run_at_the_"
               "accounted_budget")]),
    Mutation("a private selection trains on its validation rows too",
             "src/renyiboost/models/tuning.py",
             "X_fit, y_fit, X_val, y_val = X[~validation], y[~validation], X[validation], "
             "y[validation]",
             "X_fit, y_fit, X_val, y_val = X, y, X[validation], y[validation]",
             ["tests/test_defaults.py::test_a_private_selection_draws_what_it_accounts"]),
    Mutation("a private selection scores rows no fit checked",
             "src/renyiboost/models/tuning.py",
             "    SGBDT(schema, task=task, epsilon=epsilon, delta=delta).check_inputs(X, y)\n",
             "",
             [("tests/test_defaults.py::test_a_private_selection_checks_every_row_and_states_"
               "its_rdp")]),
    Mutation("a tuned model states its run's RDP under the selection's epsilon",
             "src/renyiboost/models/tuning.py", '"budget_rdp": budget.total_rdp}',
             '"budget_rdp": budget.run_rdp}',
             [("tests/test_defaults.py::test_a_private_selection_checks_every_row_and_states_"
               "its_rdp")]),
    Mutation("finish() buys a grid no tree follows", "src/renyiboost/stream/engine.py",
             '"run here)": burst <= 0,', '"run here)": False,',
             ["tests/test_split_grid.py::test_no_grid_where_the_end_runs_no_burst"]),
    Mutation("finish() buys a grid after the last round", "src/renyiboost/stream/engine.py",
             '"max_rounds is reached": not rounds_left(config, booster),',
             '"max_rounds is reached": False,',
             ["tests/test_split_grid.py::test_no_grid_and_no_charge_after_the_last_round"]),
    Mutation("a forked child learns on its parent's ledger", "src/renyiboost/stream/store.py",
             "    if os.getpid() != opened_by:\n        raise LedgerConflict(",
             "    if False:\n        raise LedgerConflict(",
             [("tests/test_store_copy.py::test_a_forked_child_neither_learns_nor_writes_on_its_"
               "parents_ledger")]),
    Mutation("a hard link opens a held store", "src/renyiboost/stream/store.py",
             "            self._lock.hold_inode(self.path)\n", "            pass\n",
             ["tests/test_ledger.py::test_another_name_of_a_held_store_is_refused"]),
    Mutation("a store restored from an older copy opens", "src/renyiboost/stream/store.py",
             "        if seen_epoch > epoch or (",
             "        if seen_epoch > epoch + 10**9 or (",
             ["tests/test_ledger.py::test_a_store_behind_an_epoch_it_reached_is_refused"]),
    Mutation("a store restored from a copy taken during its own open opens",
             "src/renyiboost/stream/store.py",
             "seen_epoch == epoch and seen_commits > commits):",
             "seen_epoch == epoch and seen_commits > commits + 10**9):",
             ["tests/test_ledger.py::test_a_store_behind_a_commit_of_its_own_open_is_refused"]),
    Mutation("a copy of a drawn model learns on one charge", "src/renyiboost/models/estimators.py",
             "        if self._drawn_from is not None and self._engine.may_learn:\n",
             "        if False:\n",
             [("tests/test_budget.py::test_a_draw_comes_before_learning_and_a_copy_that_may_"
               "learn_draws_too")]),
    Mutation("a bad label erases the call's positions", "src/renyiboost/stream/engine.py",
             "        if not labels_checked and (bad := self.validator.bad_rows(targets, keys)):",
             "        if False and (bad := self.validator.bad_rows(targets, keys)):",
             [("tests/test_sharded.py::test_a_bad_label_keeps_its_position_and_a_bad_shape_"
               "changes_no_shard")]),
    Mutation("the Kafka key source is not pinned", "src/renyiboost/connectors/kafka.py",
             "        pin_meta(engine.store, KEY_SOURCE_META, key_source, lambda recorded: (",
             "        (lambda *_: None)(engine.store, KEY_SOURCE_META, key_source, lambda recorded: (",
             ["tests/test_kafka_ledger.py::test_the_key_source_is_pinned_for_the_ledgers_life"]),
    Mutation("a new store counts a partition from its first message delivered",
             "src/renyiboost/connectors/kafka.py",
             ("            tp.offset = self._expected[name] = (\n"
              "                int(stored) if stored is not None else self._log_start(tp))\n"),
             ("            tp.offset = int(stored) if stored is not None else OFFSET_BEGINNING\n"
              "            if stored is not None:\n"
              "                self._expected[name] = int(stored)\n"),
             ["tests/test_kafka_ledger.py::test_offsets_without_a_message_are_positions"]),
    Mutation("a replay's key source is not pinned", "src/renyiboost/connectors/service.py",
             "    pin_meta(engine.store, KEY_SOURCE_META, rows, lambda recorded: (",
             "    (lambda *_: None)(engine.store, KEY_SOURCE_META, rows, lambda recorded: (",
             ["tests/test_kafka_ledger.py::test_a_replay_and_a_topic_never_feed_one_store"]),
    Mutation("a re-created model topic gets only the versions after the store's record",
             "src/renyiboost/connectors/kafka.py",
             "    if low <= offset < high:\n        releases = model_releases(",
             "    if True:\n        return published, None\n    if True:\n"
             "        releases = model_releases(",
             ["tests/test_kafka_ledger.py::test_a_recreated_model_topic_gets_every_version_again"]),
    Mutation("a re-created shard store joins its deployment", "src/renyiboost/stream/sharded.py",
             "        self._pin_members()\n", "        pass\n",
             ["tests/test_sharded.py::test_a_shard_store_lost_and_created_again_is_refused"]),
    Mutation("a restore forgets the rounds its trigger owes", "src/renyiboost/stream/engine.py",
             "    return max(0, due - rounds_done)", "    return 0 * max(0, due - rounds_done)",
             [("tests/test_stream.py::test_a_crash_inside_a_trigger_runs_its_other_rounds_after_"
               "the_restore"),
              ("tests/test_sharded.py::test_a_crash_inside_a_trigger_owes_its_rounds_to_the_"
               "reopened_deployment")]),
    Mutation("the start check trusts an offset the model topic lost",
             "src/renyiboost/connectors/kafka.py",
             "    if low <= offset < high:\n        return offset\n",
             "    if True:\n        return offset\n",
             # the trainer's start now finds a lost release first (still_published), so the
             # rule is caught on its own: it still guards a read racing retention
             [("tests/test_kafka_ledger.py::test_the_start_check_reads_only_an_offset_the_"
               "partition_holds")]),
    Mutation("the start check sees only the newest version's store and epoch",
             "src/renyiboost/connectors/kafka.py",
             "    foreign = next((r for r in releases if r.store_id != identity.store_id), None)",
             "    foreign = next((r for r in releases[-1:] if r.store_id != identity.store_id "
             "and r.version == max(x.version for x in releases)), None)",
             [("tests/test_kafka_ledger.py::test_a_model_topic_without_the_published_offset_is"
               "_read_from_its_start"),
              "tests/test_kafka_ledger.py::test_a_release_of_a_later_epoch_of_the_store_is_refused"],
             also=(("src/renyiboost/connectors/kafka.py",
                    ("    latest_epoch = max((r.epoch for r in releases if r.epoch is not None), "
                     "default=None)"), "    latest_epoch = newest.epoch"),)),
    Mutation("a shard learns an event outside its key's partition (a second shard's ledger)",
             "src/renyiboost/connectors/kafka.py",
             "            if message.partition() != placed:",
             "            if False and message.partition() != placed:",
             [("tests/test_kafka_ledger.py::test_a_shard_dead_letters_an_event_outside_its_keys"
              "_partition")]),
    Mutation("a shard learns a key in another spelling (a second shard's ledger)",
             "src/renyiboost/connectors/kafka.py",
             "            if raw != key.encode():",
             "            if False and raw != key.encode():",
             [("tests/test_connector_faults.py::test_shards_refuse_a_payload_key_and_dead_letter"
              "_other_spellings")]),
    Mutation("keyed records reach hash-placed shards on stores Kafka fed (a second ledger)",
             "src/renyiboost/stream/sharded.py",
             "        if self._hash_routing_checked or self.shards.n == 1:",
             "        if True:",
             [SHARDED[0] + "::test_keyed_records_are_refused_on_stores_a_kafka_deployment_fed"]),
    Mutation("a Kafka shard reads into a store its keys reached by hash (a second ledger)",
             "src/renyiboost/connectors/kafka.py",
             "        if partition_map is not None and (self.keys_place_shards or placed > 1) and (",
             "        if False and (",
             [("tests/test_connector_faults.py::test_a_kafka_shard_refuses_a_store_its_keys_"
               "reached_by_hash")]),
    Mutation("a partition that went back keeps its old dead-letter mark (new bad events lost)",
             "src/renyiboost/connectors/kafka.py",
             "                _, name, offset = going\n"
             "                reached[name] = min(reached.get(name, 0), offset)",
             "                _, name, offset = going\n"
             "                reached[name] = max(reached.get(name, 0), offset)",
             [("tests/test_connector_faults.py::test_a_partition_that_went_back_dead_letters_its"
               "_new_bad_events")]),
    Mutation("a group commit writes only its last change's meta (the grid's entry lost)",
             "src/renyiboost/stream/store.py",
             "                meta |= one.meta  # a later change's entry replaces an earlier one's",
             "                meta = one.meta  # a later change's entry replaces an earlier one's",
             ["tests/test_split_grid.py::test_a_restart_after_the_grid_restores_it_and_its_charges"]),
    Mutation("DiPriMe takes three classes as 0/1 labels (sensitivity 3 under noise for 1)",
             "src/renyiboost/models/batch.py",
             "                and not self.multiclass):",
             "                and not self.multiclass and False):",
             [("tests/test_multiclass.py::test_the_binary_learners_of_the_field_refuse_three"
               "_classes")]),
    Mutation("a PostgreSQL schema restored from a dump taken mid-run opens",
             "src/renyiboost/stream/postgres.py",
             "    def _record_in_transaction(self, store_id: str, epoch: int, commits: int) -> None:\n"
             "        if self._records:",
             "    def _record_in_transaction(self, store_id: str, epoch: int, commits: int) -> None:\n"
             "        if False:",
             ["tests/test_postgres_store.py::test_a_schema_restored_from_an_older_dump_is_refused"]),
    Mutation("a partition map may send one key to two shards",
             "src/renyiboost/stream/sharded.py",
             "    split = np.flatnonzero((owners != owners[0]).any(axis=0))",
             "    split = np.flatnonzero((owners != owners[0]).all(axis=0) & False)",
             [("tests/test_sharded.py::test_a_partition_map_that_would_give_a_key_two_shards_is"
              "_refused")]),
    Mutation("a sparse feature is called stopped for being sparse",
             "src/renyiboost/validation.py",
             "& (rate * gap >= STOPPED_EXPECTED_VALUES))",
             "& (rate * gap >= 0))",
             [("tests/test_stream.py::test_a_feature_that_stops_arriving_warns_once_but_a_sparse"
              "_one_does_not")]),
    Mutation("a feature that stops arriving goes unnoticed",
             "src/renyiboost/validation.py",
             "        new = self._stopped() & ~self._warned\n",
             "        new = self._stopped() & False\n",
             [("tests/test_stream.py::test_a_feature_that_stops_arriving_warns_once_but_a_sparse"
              "_one_does_not")]),
    Mutation("a follower's export numbers its trees from round 0 (wrong trees kept)",
             "src/renyiboost/connectors/kafka.py",
             "            max(self.version - 1, 0) - ens.n_trees)}).check_whole()",
             "            0)}).check_whole()",
             [("tests/test_connector_faults.py::test_a_follower_gives_the_whole_model_it_rebuilt"
              "_from_the_topic")]),
    Mutation("a rare feature's rate is read from its first few values",
             "src/renyiboost/validation.py",
             "        return ((self.values >= STOPPED_EXPECTED_VALUES) & (gap >= STOPPED_MIN_RECORDS)",
             "        return ((self.values > 0) & (gap >= STOPPED_MIN_RECORDS)",
             ["tests/test_input_checks.py::test_rare_features_that_never_stop_are_not_called_stopped"]),
    Mutation("a restart reads its pool's key order as the stream's",
             "src/renyiboost/validation.py",
             "            arrivals.last = np.where(arrivals.values > 0, len(X) - 1, -1)",
             ("            arrivals.last = np.where(arrivals.values > 0, len(X) - 1 - np.argmax("
              "(~np.isnan(X))[::-1], axis=0), -1)"),
             [("tests/test_stream.py::test_a_restarted_stream_judges_a_features_gaps_from_the"
              "_restart")]),
    Mutation("a record deleted by hand is not written again (an older copy opens)",
             "src/renyiboost/stream/store.py",
             "        if self._record_fd is not None and os.fstat(self._record_fd).st_nlink == 0:",
             ("        if self._record_fd is not None and os.fstat(self._record_fd).st_nlink == 0 "
              "and False:"),
             [("tests/test_ledger.py::test_the_record_beside_a_store_is_rewritten_in_place_and"
              "_comes_back_if_deleted")]),
    Mutation("a PostgreSQL store is created where a lost one's record remains",
             "src/renyiboost/stream/postgres.py",
             "        recorded = self._recorded()\n        if recorded is not None:\n",
             "        recorded = self._recorded()\n        if recorded is not None and False:\n",
             ["tests/test_postgres_store.py::test_a_store_is_never_created_where_a_lost_one_was"]),
    Mutation("a reshard forgets where the keys came from",
             "src/renyiboost/stream/reshard.py",
             "            if key_source is not None:\n                marks[KEY_SOURCE_META]",
             "            if False:\n                marks[KEY_SOURCE_META]",
             ["tests/test_reshard.py::test_where_keys_came_from_moves_with_the_ledgers"]),
    Mutation("reconciled shards follow one without the initial score (a second score)",
             "src/renyiboost/stream/sharded.py",
             "key=lambda k: (states[k].rounds_done, states[k].initialized))",
             "key=lambda k: (states[k].rounds_done, not states[k].initialized))",
             [("tests/test_sharded.py::test_a_crash_between_two_shards_initial_scores_installs"
              "_it_once")]),
    Mutation("a seeded store resumed without a seed says it is not seeded",
             "src/renyiboost/stream/engine.py",
             "                               booster.noise.seeded or booster.seeded_before,",
             "                               booster.noise.seeded,",
             ["tests/test_ledger.py::test_a_store_once_seeded_says_so_however_it_is_resumed"]),
    Mutation("a copy of a fitted model keeps the last round's Poisson draws",
             "src/renyiboost/models/booster.py",
             '        state["_uniforms"] = np.empty(0)\n',
             "",
             [("tests/test_privacy.py::test_a_copy_of_a_fitted_model_leaves_out_the_last_rounds"
               "_poisson_draws")]),
    Mutation("a release over bounds read from the data does not say so",
             "src/renyiboost/schema.py",
             "target_bounds=target, bounds_read_from_data=True)",
             "target_bounds=target)",
             [("tests/test_models.py::test_reading_bounds_from_data_warns_and_every_release"
               "_says_so")]),
    Mutation("a release testing a feature the schema lacks is accepted",
             "src/renyiboost/release.py",
             "max(tree.features) < n_features:", "max(tree.features) < n_features + 100:",
             [("tests/test_export.py::test_a_release_that_does_not_fit_its_schema_is_refused"
               "_whole")]),
    Mutation("a new deployment's stores are created without their places (two ledgers)",
             "src/renyiboost/stream/sharded.py",
             "store=store_at(location, create=True, meta=place),",
             "store=store_at(location, create=True, meta=None),",
             [("tests/test_sharded.py::test_a_new_deployments_stores_hold_their_places_before"
               "_their_first_open")]),
    Mutation("an install that fails after its commit leaves the engine running",
             "src/renyiboost/stream/engine.py",
             "            self._install_now(event, after, newly)\n"
             "        except BaseException as error:\n            self._broken = error\n",
             "            self._install_now(event, after, newly)\n"
             "        except BaseException as error:\n            del error\n",
             [("tests/test_stream.py::test_an_install_that_fails_after_its_commit_stops_the"
               "_engine")]),
    Mutation("trees appended after the rows a tree cap kept, over older trees",
             "src/renyiboost/models/trees.py",
             "    return row if rest == 0 else None",
             "    return 0",
             [("tests/test_predict_kernels.py::test_extend_grows_by_doubling_and_keeps_earlier"
               "_views")]),
    Mutation("an ONNX regression output scaled in float32",
             "src/renyiboost/export.py",
             "        extra += [helper.make_tensor(name, TensorProto.DOUBLE, [], [value])",
             "        extra += [helper.make_tensor(name, TensorProto.FLOAT, [], [value])",
             [("tests/test_export.py::test_a_regression_export_keeps_the_precision_of_targets"
               "_far_from_zero")],
             also=(("src/renyiboost/export.py",
                    'helper.make_node("Cast", ["margin"], ["margin_double"], to=TensorProto.DOUBLE)',
                    'helper.make_node("Cast", ["margin"], ["margin_double"], to=TensorProto.FLOAT)'),
                   ("src/renyiboost/export.py",
                    'graph_outputs = [helper.make_tensor_value_info("variable", TensorProto.DOUBLE,',
                    'graph_outputs = [helper.make_tensor_value_info("variable", TensorProto.FLOAT,'))),
]


def run(mutation: Mutation, python: str) -> tuple[bool, float, str]:
    """Apply ``mutation`` in a copy of the tree and run its tests; True if they failed."""
    with tempfile.TemporaryDirectory(prefix="renyiboost-mutant-") as tmp:
        copy = Path(tmp)
        for part in ("src", "tests"):
            shutil.copytree(ROOT / part, copy / part,
                            ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
        shutil.copy(ROOT / "pyproject.toml", copy / "pyproject.toml")
        for path, old, new in ((mutation.path, mutation.old, mutation.new), *mutation.also):
            target = copy / path
            text = target.read_text()
            if text.count(old) != 1:
                raise SystemExit(f"mutation {mutation.name!r}: the text to replace occurs "
                                 f"{text.count(old)} times in {path}")
            target.write_text(text.replace(old, new))
        env = {**os.environ, "PYTHONPATH": str(copy / "src"), "PYTHONDONTWRITEBYTECODE": "1"}
        start = time.monotonic()
        result = subprocess.run(
            [python, "-m", "pytest", "-x", "-q", "-p", "no:cacheprovider", "-W",
             "ignore::Warning", "--hypothesis-profile=mutants", *mutation.tests],
            check=False, cwd=copy, env=env, capture_output=True, text=True, timeout=900)
        failed = result.returncode != 0
        lines = (result.stdout.strip().splitlines() or [""])
        return failed, time.monotonic() - start, lines[-1]


def main() -> int:
    survivors = []
    print(f"{len(MUTATIONS)} mutations; each must make its tests fail")
    for mutation in MUTATIONS:
        killed, seconds, summary = run(mutation, sys.executable)
        print(f"  {'killed  ' if killed else 'SURVIVED'} {mutation.name:48s} {seconds:5.1f} s  "
              f"{summary}", flush=True)
        if not killed:
            survivors.append(mutation.name)
    if survivors:
        print(f"{len(survivors)} mutation(s) survived: {survivors}")
        return 1
    print("every mutation was caught")
    return 0


if __name__ == "__main__":
    sys.exit(main())
