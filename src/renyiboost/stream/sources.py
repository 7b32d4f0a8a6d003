"""In-memory sources: replay a data set as a stream of non-i.i.d. batches.

Scenarios (``scenario=``):

* ``"iid"`` — rows shuffled;
* ``"natural"`` — the data set's own order (Elec2 is a time series);
* ``"sorted"`` — rows sorted by one feature (``sort_by``, default the first numeric one);
* ``"late"`` — the S-GBDT paper's late-batch stream (Fig. 7): one sub-population (Abalone's
  old shells, Adult's >50K, …, see :data:`LATE_SUBPOPULATIONS`) is held back and arrives
  only after the rest;
* ``"switch"`` — the drift built into river's synthetic generators (:data:`SYNTHETIC`):
  ``agrawal`` (classification function 0, then 2, at n/2), ``sea`` (SEA variant 0, then
  variant 3, at n/2) and ``friedman`` (``FriedmanDrift`` global recurring abrupt drift:
  features swap at n/3 and swap back at 2n/3); ``"natural"`` replays them the same way.

Each :class:`Batch` carries encoded rows, labels, the records' keys (the row id: one row is
one person) and their source positions, so the engine can commit exactly what it consumed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np

from renyiboost.datasets import (
    AGRAWAL_SCHEMA,
    FRIEDMAN_SCHEMA,
    LOADERS,
    SEA_SCHEMA,
    Dataset,
    load,
)
from renyiboost.schema import PublicSchema

Scenario = Literal["iid", "natural", "sorted", "late", "switch"]
SCENARIOS: tuple[str, ...] = ("iid", "natural", "sorted", "late", "switch")

#: The late sub-population of each data set: a mask over (X, y) and its description.
LATE_SUBPOPULATIONS: dict[str, tuple[str, Callable[[Dataset], np.ndarray]]] = {
    "abalone": ("old shells (rings >= 13)", lambda d: d.y >= 13),
    "adult": ("income > 50K", lambda d: d.y == 1),
    "elec2": ("price UP", lambda d: d.y == 1),
    "california": ("house value > $300k", lambda d: d.y > 3.0),
    "covertype": ("Lodgepole Pine", lambda d: d.y == 1),
    "agrawal": ("class 1", lambda d: d.y == 1),
    "sea": ("class 1", lambda d: d.y == 1),
    "friedman": ("y > 20", lambda d: d.y > 20.0),
}

def _collect(name: str, streams: list, schema: PublicSchema, task: str) -> Dataset:
    xs, ys = [], []
    for stream in streams:
        for x, y in stream:
            xs.append({f"x{k}" if isinstance(k, int) else k: v for k, v in x.items()})
            ys.append(float(y))
    columns = {name: [x.get(name) for x in xs] for name in schema.names}
    return Dataset(name, schema.encode_columns(columns), np.asarray(ys), schema, task)


def agrawal_switch(n: int = 20_000, seed: int = 0) -> Dataset:
    """``n`` Agrawal records whose concept switches abruptly from function 0 to 2 at n/2."""
    from river.datasets import synth

    return _collect("agrawal", [
        synth.Agrawal(classification_function=0, seed=seed).take(n // 2),
        synth.Agrawal(classification_function=2, seed=seed + 1).take(n - n // 2),
    ], AGRAWAL_SCHEMA, "classification")


def sea_switch(n: int = 20_000, seed: int = 0) -> Dataset:
    """``n`` SEA records (10 % label noise) whose threshold switches from variant 0 to 3."""
    from river.datasets import synth

    return _collect("sea", [
        synth.SEA(variant=0, noise=0.1, seed=seed).take(n // 2),
        synth.SEA(variant=3, noise=0.1, seed=seed + 1).take(n - n // 2),
    ], SEA_SCHEMA, "classification")


def friedman_drift(n: int = 20_000, seed: int = 0) -> Dataset:
    """``n`` FriedmanDrift records, global recurring abrupt drift at n/3 and 2n/3."""
    from river.datasets import synth

    if n < 3:  # river's own error spoke of drift locations (review Y #6)
        raise ValueError(f"friedman replays need at least 3 records (its drifts are at n/3 "
                         f"and 2n/3), got limit {n}")
    stream = synth.FriedmanDrift(drift_type="gra", position=(n // 3, 2 * n // 3), seed=seed)
    return _collect("friedman", [stream.take(n)], FRIEDMAN_SCHEMA, "regression")


#: Synthetic drifting data sets: name → generator(n, seed).
SYNTHETIC: dict[str, Callable[..., Dataset]] = {
    "agrawal": agrawal_switch, "sea": sea_switch, "friedman": friedman_drift,
}
#: Every data set a source can replay by name (Adult's test split is for held-out scores; the
#: multiclass sets are for the batch field table and River's own evaluation).
STREAM_DATASETS: tuple[str, ...] = (
    *(name for name in LOADERS if name not in ("adult-test", "covertype7", "image_segments")),
    *SYNTHETIC)


@dataclass(frozen=True)
class Batch:
    """One batch of a replayed stream."""

    X: np.ndarray
    y: np.ndarray
    keys: list[str]
    positions: list[tuple[str, int]]
    late: np.ndarray  # bool: record belongs to the late sub-population


class InMemorySource:
    """Replays a bundled data set (or a :data:`SYNTHETIC` one) under a drift scenario.

    Examples
    --------
    >>> source = InMemorySource("abalone", scenario="late", batch_size=1000)
    >>> batches = list(source)
    >>> len(batches), bool(batches[-1].late.all()), bool(batches[0].late.any())
    (5, True, False)
    """

    def __init__(
        self,
        dataset: Dataset | str,
        scenario: Scenario = "iid",
        batch_size: int = 500,
        sort_by: str | None = None,
        limit: int | None = None,
        seed: int = 0,
    ) -> None:
        if scenario not in SCENARIOS:
            raise ValueError(f"scenario must be one of {SCENARIOS}, got {scenario!r}")
        for name, value, least in (("batch_size", batch_size, 1), ("seed", seed, 0),
                                   ("limit", 1 if limit is None else limit, 1)):
            if isinstance(value, bool) or not isinstance(value, int | np.integer) or value < least:
                raise ValueError(f"{name} must be a whole number >= {least}"
                                 + (" or None" if name == "limit" else "") + f", got {value!r}")
        if isinstance(dataset, str):
            if dataset not in SYNTHETIC and dataset not in LOADERS:
                raise ValueError(f"unknown data set {dataset!r}; choose a bundled one "
                                 f"{sorted(LOADERS)} or a generator {sorted(SYNTHETIC)}")
            dataset = (SYNTHETIC[dataset](n=limit or 20_000, seed=seed) if dataset in SYNTHETIC
                       else load(dataset))
        if scenario == "switch" and dataset.name not in SYNTHETIC:
            raise ValueError(f"scenario 'switch' replays a drifting generator, one of "
                             f"{sorted(SYNTHETIC)}; got {dataset.name!r}")
        if scenario == "late" and dataset.name not in LATE_SUBPOPULATIONS:
            raise ValueError(f"scenario 'late' holds back a sub-population known for "
                             f"{sorted(LATE_SUBPOPULATIONS)}; {dataset.name!r} has none")
        numeric = [f for f, c in zip(dataset.schema.names, dataset.schema.is_categorical,
                                     strict=True) if not c]
        if sort_by is not None and scenario != "sorted":
            raise ValueError(f"sort_by is read only by the 'sorted' scenario, not {scenario!r}")
        if scenario == "sorted" and not numeric:  # (a bare StopIteration: review Y #6)
            raise ValueError(f"scenario 'sorted' orders by a numeric feature; {dataset.name!r} "
                             "has none")
        if sort_by is not None and sort_by not in numeric:
            raise ValueError(f"sort_by must name a numeric feature of {dataset.name!r} (one "
                             f"of {numeric}), got {sort_by!r}")
        self.data = dataset
        self.scenario = scenario
        self.batch_size = batch_size
        self.seed = seed
        self.order = self._order(sort_by, limit)
        _, rule = LATE_SUBPOPULATIONS.get(dataset.name, ("", lambda d: np.zeros(len(d), bool)))
        self.late_mask = np.asarray(rule(dataset), dtype=bool)
        # The partition names the order, so that a store fed by one order is not resumed
        # in another (:func:`committed_records`); the default order keeps the plain name.
        order = {"scenario": scenario, "seed": seed, "limit": limit, "sort_by": sort_by}
        plain = {"scenario": "iid", "seed": 0, "limit": None, "sort_by": None}
        query = "&".join(f"{k}={v}" for k, v in order.items() if v != plain[k])
        self.partition = f"memory:{dataset.name}" + (f"?{query}" if query else "")

    @property
    def schema(self) -> PublicSchema:
        return self.data.schema

    def _order(self, sort_by: str | None, limit: int | None) -> np.ndarray:
        """Row order of the scenario; ``limit`` keeps a prefix of a time-ordered stream and
        a random subset (drawn before reordering) of any other, so a limited 'late' or
        'sorted' stream still spans the whole data set."""
        data, rng = self.data, np.random.default_rng(self.seed)
        n = len(data)
        if self.scenario in ("natural", "switch"):
            return np.arange(n)[:limit]
        shuffled = rng.permutation(n)[:limit]
        if self.scenario == "sorted":
            schema = data.schema
            name = sort_by or next(
                (f for f, c in zip(schema.names, schema.is_categorical, strict=True) if not c)
            )
            column = schema.names.index(name)
            return shuffled[np.argsort(data.X[shuffled, column], kind="stable")]
        if self.scenario == "late":
            _, rule = LATE_SUBPOPULATIONS[data.name]
            late = np.asarray(rule(data), dtype=bool)[shuffled]
            return np.concatenate([shuffled[~late], shuffled[late]])
        return shuffled

    def __len__(self) -> int:
        return int(self.order.size)

    @property
    def drift_starts(self) -> list[int]:
        """Stream positions (records before it) where the scenario's drift begins: the late
        sub-population's first record, or the generator's switch points (agrawal and sea at
        n/2, friedman at n/3 and 2n/3 of its n records, also in their natural order); none
        for the other scenarios. For evaluation and plots only: the late one is read from
        the labels of the (public) data set, and nothing of it reaches the engine."""
        if self.scenario == "late":
            first = np.flatnonzero(self.late_mask[self.order])
            return [int(first[0])] if first.size else []
        if self.data.name in SYNTHETIC and self.scenario in ("switch", "natural"):
            n = len(self.data)
            points = [n // 3, 2 * n // 3] if self.data.name == "friedman" else [n // 2]
            return [p for p in points if p < len(self)]
        return []

    def __iter__(self) -> Iterator[Batch]:
        return self.batches()

    def batches(self, after: int = 0) -> Iterator[Batch]:
        """The batches of the records after the first ``after`` (at their own positions)."""
        for start in range(after, self.order.size, self.batch_size):
            rows = self.order[start : start + self.batch_size]
            yield Batch(
                X=self.data.X[rows],
                y=self.data.y[rows],
                keys=[str(r) for r in rows],
                positions=[(self.partition, start + i + 1) for i in range(rows.size)],
                late=self.late_mask[rows],
            )


def committed_records(source: InMemorySource, offsets: Mapping[str, Any]) -> int:
    """How many of ``source``'s records a store's committed ``offsets`` cover: a run on a
    store that replayed part of the source continues after them (it once fed every record
    again, counting each twice in the public schedule). A store fed by another replay order
    of a ``memory:`` source is refused: resumed in this order, some records would come twice
    and others never."""
    other = sorted(p for p in offsets if p.startswith("memory:") and p != source.partition)
    if other:
        raise ValueError(f"this state store replayed {', '.join(other)}, not "
                         f"{source.partition}: a replay in another order cannot continue it "
                         "(use a new store, or the same data set, scenario, seed and limit)")
    return int(offsets.get(source.partition, 0))
