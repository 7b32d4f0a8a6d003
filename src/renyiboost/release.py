"""The public release: the only thing renyiboost lets out to the world.

DEVELOPERS invariant 2. What leaves for the world — the model topic, model exports, a served
model — is a :class:`ModelRelease`: trees, the initial score, the public schema, the task and
hyper-parameters, the privacy parameters (:class:`PrivacyGuarantee`: ε, δ, α̂, σ, B) and a
version, plus the identity of the store whose ledger paid for it. Every field is either a DP
output (leaves, initial score), drawn from public randomness (splits), or a public input.

Nothing here counts anything. Counts of keys, spent budgets, quantiles, offsets and dead
letters are a deterministic function of who is in the data (adding one key moves
``n_active + n_retired`` by one in every run): they are **operator telemetry**
(:class:`renyiboost.stream.engine.OperatorTelemetry`), for the people who run the service,
on its own channel, never inside a release.

A release's shape depends only on public inputs: one release per scheduled output (the
initial score is version 1, the tree of round ``r`` version ``r + 2``), each carrying the
trees it adds, so two neighbouring streams publish the same number of messages of the same
shape (``tests/test_privacy.py``); a release too large for one message goes in parts whose
number is counted from public inputs too (:func:`release_parts`).
"""

from __future__ import annotations

import math
from itertools import pairwise
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, model_serializer, model_validator

from renyiboost.accounting import Calibration
from renyiboost.schema import PublicSchema

RELEASE_FORMAT = "renyiboost.release/1"
#: The deepest tree a release holds: the learners' own cap (``SGBDTParams.depth``).
MAX_TREE_DEPTH = 12


class PrivacyGuarantee(BaseModel):
    """The privacy parameters of a model: functions of its configuration only.

    ``epsilon`` is the (ε, δ) that the per-unit Rényi budget ``budget_rdp`` at order
    ``order`` converts to, plus ``size_estimate_epsilon`` where a batch fit bought its size
    (a pure ε-DP Laplace count, added by basic composition; a composer who works in RDP
    from ``order`` and ``budget_rdp`` must add that count's own: they cover the rest
    only); ``sigma`` is the noise scale of the tree leaves. ``unit`` is what
    one budget protects: a key on a stream, a row in a batch fit. ``epsilon`` is ``None``
    for a model trained without privacy.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    private: bool
    unit: Literal["key", "row"]
    epsilon: float | None
    delta: float | None
    order: int | None
    sigma: float | None
    budget_rdp: float | None
    seeded_for_testing: bool
    #: ε of the Laplace count a batch fit bought to choose its defaults (included in
    #: ``epsilon``, not in ``budget_rdp``; the trees got the rest), or ``None``.
    size_estimate_epsilon: float | None = Field(None, ge=0)
    #: A stream's earlier noise stages: ``(last stream position, σ)`` of each; rounds after
    #: the last have ``sigma``. The same order and budget cover all of them.
    stage_sigmas: list[tuple[int, float]] | None = None

    @classmethod
    def of(cls, calibration: Calibration | None, unit: Literal["key", "row"],
           seeded: bool, size_estimate_epsilon: float | None = None,
           stage_sigmas: list[tuple[int, float]] | None = None) -> PrivacyGuarantee:
        cal = calibration
        extra = size_estimate_epsilon or 0.0
        return cls(
            stage_sigmas=stage_sigmas or None,
            private=cal is not None, unit=unit,
            epsilon=cal.epsilon + extra if cal else None, delta=cal.delta if cal else None,
            order=cal.order if cal else None, sigma=cal.sigma if cal else None,
            budget_rdp=cal.budget_rdp if cal else None, seeded_for_testing=seeded,
            size_estimate_epsilon=size_estimate_epsilon if cal else None,
        )

    @property
    def epsilon_or_inf(self) -> float:
        return math.inf if self.epsilon is None else self.epsilon


class ReleasedTree(BaseModel):
    """One random tree with its DP leaves (heap order, see :mod:`renyiboost.models.trees`)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    round: int
    features: list[int]
    thresholds: list[float]
    #: One value a leaf, or one value a class of a multiclass model (vector leaves).
    leaves: list[float] | list[list[float]]


#: :class:`ModelRelease` fields written only when set (a release without them dumps as it
#: did before they existed).
OPTIONAL_RELEASE_FIELDS = frozenset({"smoothing_spans", "answer_map", "part"})


class ModelRelease(BaseModel):
    """A public model version, or the part of it added since an earlier version.

    ``version`` counts the outputs released so far (initial score = 1, each round + 1);
    ``trees`` holds the trees of the rounds covered by this release (all of them in a full
    export). ``store_id`` and ``epoch`` name the ledger that paid for it (``None`` for a
    batch fit, which keeps no ledger).
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    #: Required: a text without it is not known to be a release of this format (one was
    #: read as one: review P #6).
    format: Literal["renyiboost.release/1"]
    model: str
    store_id: str | None
    epoch: int | None
    version: int
    task: Literal["regression", "classification"]
    depth: int
    public_schema: dict[str, Any]
    params: dict[str, Any]
    #: The initial margin: one number, or one a class of a multiclass model.
    init_score: float | list[float]
    max_trees: int | None
    trees: list[ReleasedTree]
    guarantee: PrivacyGuarantee
    #: Per feature, the span a smoothing window is a share of, when a private split grid
    #: set it (:meth:`renyiboost.models.grid.QuantileMap.smoothing_spans`: post-processing
    #: of the grid's noisy histograms); ``None``: the public ranges.
    smoothing_spans: list[float] | None = None
    #: ``(a, b)``: answers are ``σ(a·m + b)`` of the trees' margin ``m``, a binary stream's
    #: recalibration (:mod:`renyiboost.models.recalibration`: post-processing of noisy
    #: sums the keys paid for); ``None``: the identity.
    answer_map: tuple[float, float] | None = None
    #: ``(k, n)``: this message is part ``k`` of ``n`` of one release too large for one
    #: model-topic message (:func:`release_parts`: a publisher catching up past a tree cap
    #: sends the cap's trees at once, 1.4 MB at 500 trees of depth 6, over librdkafka's
    #: default ``message.max.bytes``); each part holds a slice of the trees and a follower
    #: applies the release once it has read all ``n`` in order (:func:`joined_parts`).
    #: ``None``: the message is a whole release.
    part: tuple[int, int] | None = None

    @model_validator(mode="after")
    def _fits_its_schema(self) -> ModelRelease:
        """Every tree has the shape its ``depth`` gives and tests features of the public
        schema, the initial score has one value an output, and an answer map belongs to a
        binary classifier. A release that breaks one is refused whole (a follower skips it
        as not a release and keeps its last good version): applied, one malformed tree once
        left a follower's arrays inconsistent, and every later answer failed."""
        schema = PublicSchema(**self.public_schema)  # the schema's own reading of its fields
        n_features, outputs = schema.n_features, schema.n_outputs
        if not 0 <= self.depth <= MAX_TREE_DEPTH:
            raise ValueError(f"depth must be in [0, {MAX_TREE_DEPTH}], got {self.depth}")
        if self.max_trees is not None and self.max_trees < 1:
            # a follower applied half of one (its schema, store and trees) before keep_last
            # refused it, and then served it (review P #1)
            raise ValueError(f"max_trees must be None or >= 1, got {self.max_trees}")
        for name in ("task", "depth"):  # a loader built the trees from one, the model from
            if name in self.params and self.params[name] != getattr(self, name):  # the other
                raise ValueError(f"params.{name} is {self.params[name]!r} but the release's "
                                 f"{name} is {getattr(self, name)!r}")
        if self.version < 0:
            raise ValueError(f"version must be >= 0, got {self.version}")
        if any(b.round <= a.round for a, b in pairwise(self.trees)):
            raise ValueError("a release's trees must be in the order of their rounds, each "
                             "once")
        if self.trees and not 0 <= self.trees[0].round <= self.trees[-1].round <= (
                self.version - 2):
            raise ValueError(f"version {self.version} holds rounds 0 to {self.version - 2} "
                             f"at most (version r + 2 releases the tree of round r), got "
                             f"rounds {self.trees[0].round} to {self.trees[-1].round}")
        smoothing = self.params.get("smoothing", 0.0)
        if isinstance(smoothing, bool) or not isinstance(smoothing, int | float) or not (
                0 <= smoothing < 1):  # a follower's float() raised TypeError on null
            raise ValueError(f"params.smoothing must be a number in [0, 1), got {smoothing!r}")
        if self.smoothing_spans is not None and (
                len(self.smoothing_spans) != n_features
                or not np.all(np.isfinite(self.smoothing_spans))
                or min(self.smoothing_spans, default=1.0) <= 0):
            raise ValueError(f"smoothing_spans must be {n_features} positive finite numbers, "
                             "one a feature")
        internal, leaf_shape = 2**self.depth - 1, (2**self.depth,) + (
            (outputs,) if outputs > 1 else ())
        if np.size(self.init_score) != outputs:
            raise ValueError(f"init_score must have {outputs} value(s), one an output, got "
                             f"{np.size(self.init_score)}")
        values = [np.asarray(self.init_score, dtype=float)]
        for tree in self.trees:
            if (len(tree.features) != internal or len(tree.thresholds) != internal
                    or np.shape(tree.leaves) != leaf_shape):
                raise ValueError(
                    f"the tree of round {tree.round} is not a tree of depth {self.depth}: "
                    f"{internal} features and thresholds and leaves of shape {leaf_shape} "
                    f"expected, got {len(tree.features)}, {len(tree.thresholds)} and "
                    f"{np.shape(tree.leaves)}")
            if tree.features and not 0 <= min(tree.features) <= max(tree.features) < n_features:
                raise ValueError(f"the tree of round {tree.round} tests feature indices "
                                 f"outside the schema's {n_features} features")
            values += [np.asarray(tree.thresholds, dtype=float),
                       np.asarray(tree.leaves, dtype=float)]
        if self.answer_map is not None:
            values.append(np.asarray(self.answer_map, dtype=float))
        if not all(np.isfinite(part).all() for part in values):
            raise ValueError("a release's thresholds, leaves, initial score and answer map "
                             "must be finite numbers")
        if self.answer_map is not None and (self.task != "classification" or outputs > 1):
            raise ValueError("an answer_map belongs to a binary classifier's release only")
        if self.part is not None and not 1 <= self.part[0] <= self.part[1]:
            raise ValueError(f"part must be (k, n) with 1 <= k <= n, got {self.part}")
        return self

    @model_serializer(mode="wrap")
    def _without_unset_options(self, handler: Any) -> dict[str, Any]:
        """A release smoothed over the public ranges, or not recalibrated, dumps as it did
        before spans and maps existed."""
        dumped = handler(self)
        for name in OPTIONAL_RELEASE_FIELDS:
            if getattr(self, name) is None:
                dumped.pop(name, None)
        return dumped

    @property
    def smoothing(self) -> float:
        """The window over which answers average the trees (``params["smoothing"]``; 0 for
        a learner without it or a release written before it existed)."""
        return float(self.params.get("smoothing", 0.0))

    @property
    def whole_trees(self) -> int:
        """How many trees the whole model of this version holds: one a round up to it, the
        newest ``max_trees`` of them when it keeps only those."""
        rounds = max(self.version - 1, 0)
        return rounds if self.max_trees is None else min(rounds, self.max_trees)

    def check_whole(self) -> ModelRelease:
        """The release itself if it holds the whole model of its version: every round's tree
        up to it (the newest ``max_trees`` of them when it keeps only those). A model-topic
        message holds only its own version's output, and exported as a model it answered
        with one tree of many under its version's name (``ValueError``)."""
        if self.part is not None:
            raise ValueError(
                f"release version {self.version} of {self.model!r} is part {self.part[0]} of "
                f"{self.part[1]} of a model-topic message, not a whole model. Export the whole "
                "model: the engine's or estimator's release(), or SGBDT.release()")
        rounds, kept = max(self.version - 1, 0), self.whole_trees
        # the trees are in order, each round once (the validator), so a count and the first
        # round say it; a list of the rounds was as long as the version claimed
        if len(self.trees) != kept or (kept and self.trees[0].round != rounds - kept):
            raise ValueError(
                f"release version {self.version} of {self.model!r} holds the trees of rounds "
                f"{[tree.round for tree in self.trees][:5]}{' …' if len(self.trees) > 5 else ''}"
                f", not the {kept} its whole model has: it is part of the model (a "
                "model-topic message holds only its own version's output). Export the whole "
                "model: the engine's or estimator's release(), or SGBDT.release()")
        return self


def released_trees(
    features: np.ndarray, thresholds: np.ndarray, leaves: np.ndarray, first_round: int,
    rounds: range | None = None,
) -> list[ReleasedTree]:
    """The trees of an ensemble's arrays (tree ``i`` is round ``first_round + i``), keeping
    those whose round is in ``rounds`` (all if ``None``)."""
    out = []
    for i in range(features.shape[0]):
        round_ = first_round + i
        if rounds is None or round_ in rounds:
            out.append(ReleasedTree(round=round_, features=features[i].tolist(),
                                    thresholds=thresholds[i].tolist(),
                                    leaves=leaves[i].tolist()))
    return out


#: A float whose JSON text is as long as any finite float's (24 characters: a sign, 17
#: significant digits, a point and a three-digit exponent; the serializer writes the
#: shortest text that reads back).
LONGEST_FLOAT = -1.2345678901234567e-308


def release_parts(release: ModelRelease, max_bytes: int) -> list[ModelRelease]:
    """``release`` as the messages that carry it: itself, or parts (:attr:`ModelRelease.
    part`) of consecutive trees when its trees would not fit in one message of
    ``max_bytes``. The trees a part holds are counted from the longest JSON a tree and the
    release's other fields can have (every DP value as long as :data:`LONGEST_FLOAT`), not
    from the values drawn: how many messages carry a version is then a function of public
    inputs only (its number of trees, the depth, the schema and parameters), as every other
    part of the release's shape is. A part of one tree is sent even when it does not fit."""
    n_trees = len(release.trees)
    if n_trees < 2:
        return [release]
    tree = release.trees[-1]
    longest_tree = ReleasedTree(
        round=release.version,
        features=[PublicSchema(**release.public_schema).n_features - 1] * len(tree.features),
        thresholds=[LONGEST_FLOAT] * len(tree.thresholds),
        leaves=np.full(np.shape(tree.leaves), LONGEST_FLOAT).tolist())
    longest_head = release.model_copy(update={
        "trees": [], "part": (n_trees, n_trees),
        "init_score": np.full(np.shape(release.init_score), LONGEST_FLOAT).tolist(),
        "answer_map": None if release.answer_map is None else (LONGEST_FLOAT,) * 2,
        "smoothing_spans": None if release.smoothing_spans is None else (
            [LONGEST_FLOAT] * len(release.smoothing_spans))})
    room = max_bytes - len(longest_head.model_dump_json().encode())
    per_part = max(room // (len(longest_tree.model_dump_json().encode()) + 1), 1)  # a comma
    if n_trees <= per_part:
        return [release]
    starts = range(0, n_trees, per_part)
    return [release.model_copy(update={"trees": release.trees[i:i + per_part],
                                       "part": (k, len(starts))})
            for k, i in enumerate(starts, start=1)]


def joined_parts(parts: list[ModelRelease]) -> ModelRelease:
    """The release whose :func:`release_parts` ``parts`` are, in order; ``ValueError`` when
    they are not all ``n`` parts of one release (a part missing, repeated or of another
    version), or the joined release is not one (checked again whole: its trees in the
    order of their rounds across the parts)."""
    n = len(parts)
    head = parts[0].model_copy(update={"trees": [], "part": None}) if parts else None
    for k, part in enumerate(parts, start=1):
        if part.part != (k, n) or part.model_copy(update={"trees": [], "part": None}) != head:
            raise ValueError(f"parts {[p.part for p in parts]} of version "
                             f"{parts[0].version} are not the {n} parts of one release")
    if head is None:
        raise ValueError("no parts to join")
    fields = head.model_dump()
    fields["trees"] = [tree for part in parts for tree in part.trees]
    return ModelRelease.model_validate(fields)
