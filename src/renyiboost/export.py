"""ONNX export of a public release (issue 16, item 6).

:func:`to_onnx` turns a :class:`~renyiboost.release.ModelRelease` — the public release and
nothing else: trees, initial score, schema, privacy parameters — into an ONNX model that any
ONNX runtime can serve. The trees become one ``ai.onnx.ml`` ``TreeEnsembleRegressor``
(regression) or ``TreeEnsembleClassifier`` (binary: logistic; multiclass: softmax over one
score a class), opset 3, with thresholds, leaf values and initial scores stored as doubles.

The model's input ``X`` is the **schema-encoded** float64 matrix of
:meth:`~renyiboost.schema.PublicSchema.encode_columns` (categories as codes, NaN for a
missing value), one column a schema feature in its order; numeric values are clipped to
their public bounds inside the graph (``Less``/``Greater``/``Where``), as every other answer
path clips them, so a value outside them answers as the engine does (with smoothing it
would not: the offsets move it across other thresholds). A smoothed release (``smoothing`` > 0) becomes every tree once for each of its
input offsets, thresholds moved against the offset and leaf values divided by their number,
which is the same average, each moved threshold the first double at which the engine's
``x + s < t`` fails (:func:`shifted_thresholds`). One tree of a single leaf
(:data:`FLOOR_WEIGHT`) follows the release's trees. The tree tests map one to one:

* numeric node: ``BRANCH_LT`` (``x < threshold`` goes to the true branch, our left child);
* categorical node: ``BRANCH_EQ`` (``code == threshold``);
* a missing value fails both tests and goes to the false branch, our fixed right branch
  (``nodes_missing_value_tracks_true`` = 0).

A regression model's margin is clipped to [−1, 1] and mapped back to the public target
bounds with ``Clip``/``Add``/``Mul`` nodes after the ensemble, as
:func:`~renyiboost.models.losses.unscale_margin` does. The privacy guarantee, the model's
name and version and the store it came from travel as metadata (``metadata_props``), all of
them public fields of the release; no count or budget of anybody is in the file.

Why by hand: ``skl2onnx`` and ``onnxmltools`` convert scikit-learn, XGBoost and LightGBM
models, not an ensemble of complete random trees with our missing-value rule, and building
the operator from the release takes fewer lines than an adapter to one of their classes.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from renyiboost.models.trees import input_shifts
from renyiboost.release import ModelRelease
from renyiboost.schema import PublicSchema

#: The ``ai.onnx.ml`` opset of the tree operators (``*_as_tensor`` double attributes).
ML_OPSET = 3
#: The default-domain opset (``Clip`` with min/max inputs needs 11 or later).
ONNX_OPSET = 17
#: The weight of a one-leaf tree added to every export: it makes an ensemble of no trees
#: (a release of the initial score alone) a valid operator, and for a binary classifier it
#: is negative. onnxruntime's ``TreeEnsembleClassifier`` decides a binary label by
#: ``score > 0.5`` instead of ``score > 0`` when no class weight is negative, so a release
#: whose leaves were all positive (an early stream release on a positive base rate) had
#: labels that contradicted its own probabilities. −1e−300 is a normal double (no
#: flush-to-zero) and moves no margin a double can tell from zero.
FLOOR_WEIGHT = -1e-300


def _shifts(release: ModelRelease, schema: PublicSchema) -> np.ndarray:
    """The input offsets of a smoothed release (:func:`~renyiboost.models.trees.
    input_shifts`), or one row of zeros."""
    shifts = input_shifts(schema, release.smoothing, spans=release.smoothing_spans)
    return np.zeros((1, schema.n_features)) if shifts is None else shifts


def _tree_attributes(release: ModelRelease, schema: PublicSchema,
                     shifts: np.ndarray) -> dict[str, list[Any]]:
    """The per-node attributes of every tree (heap order: internal node ``i`` has the id
    ``i``, its children ``2i + 1`` (true) and ``2i + 2`` (false); leaf ``j`` the id
    ``2^d − 1 + j``), once for every offset of a smoothed release: ``x + s < t`` is
    ``x < t − s``, so copy ``k`` of a tree tests its numeric thresholds minus offset ``k``
    (tree id ``k · n_trees + tree``)."""
    n_internal = 2**release.depth - 1
    node = np.arange(n_internal + 2**release.depth)
    internal = node < n_internal
    columns: dict[str, list[Any]] = {name: [] for name in (
        "nodes_treeids", "nodes_nodeids", "nodes_featureids", "nodes_values", "nodes_modes",
        "nodes_truenodeids", "nodes_falsenodeids", "nodes_missing_value_tracks_true")}
    copies = [(shift, released) for shift in shifts for released in release.trees]
    for tree, (shift, released) in enumerate(copies):
        features = np.zeros(node.size, dtype=np.int64)
        values = np.zeros(node.size)
        features[:n_internal] = released.features
        values[:n_internal] = shifted_thresholds(np.asarray(released.thresholds, dtype=float),
                                                 shift[released.features])
        categorical = schema.is_categorical[features] & internal
        modes = np.where(internal, np.where(categorical, "BRANCH_EQ", "BRANCH_LT"), "LEAF")
        columns["nodes_treeids"] += [tree] * node.size
        columns["nodes_nodeids"] += node.tolist()
        columns["nodes_featureids"] += features.tolist()
        columns["nodes_values"] += values.tolist()
        columns["nodes_modes"] += modes.tolist()
        columns["nodes_truenodeids"] += np.where(internal, 2 * node + 1, 0).tolist()
        columns["nodes_falsenodeids"] += np.where(internal, 2 * node + 2, 0).tolist()
        columns["nodes_missing_value_tracks_true"] += [0] * node.size
    for name, value in (("nodes_treeids", len(copies)), ("nodes_nodeids", 0),
                        ("nodes_featureids", 0), ("nodes_values", 0.0), ("nodes_modes", "LEAF"),
                        ("nodes_truenodeids", 0), ("nodes_falsenodeids", 0),
                        ("nodes_missing_value_tracks_true", 0)):
        columns[name].append(value)  # the one-leaf tree of :data:`FLOOR_WEIGHT`
    return columns


def shifted_thresholds(thresholds: np.ndarray, shifts: np.ndarray) -> np.ndarray:
    """The thresholds ``v`` with ``x < v`` exactly when ``x + s < t`` in floating point, as
    the engine's smoothed answer tests them: the smallest double ``v`` with ``v + s >= t``.
    ``t − s`` rounded may lie a step or two off it, and then an input there took the other
    branch in ONNX (a whole leaf over the number of offsets apart)."""
    v = thresholds - shifts
    for _ in range(64):  # up to the first double that reaches t (a step or two)
        short = v + shifts < thresholds
        if not short.any():
            break
        v = np.where(short, np.nextafter(v, np.inf), v)
    for _ in range(64):  # then down while the double below still reaches it
        below = np.nextafter(v, -np.inf)
        lower = below + shifts >= thresholds
        if not lower.any():
            break
        v = np.where(lower, below, v)
    return v


def _leaf_targets(release: ModelRelease, n_copies: int,
                  n_outputs: int) -> tuple[list[int], list[int], list[int], list[float]]:
    """(tree ids, node ids, output ids, weights) of every leaf value: one a leaf, or one a
    class and leaf for vector leaves (tree-major, then leaf, then class); a smoothed
    release's copies (:func:`_tree_attributes`) each carry 1 / copies of the value."""
    n_leaves = 2**release.depth
    weights = np.asarray([tree.leaves for tree in release.trees], dtype=float).reshape(-1)
    weights = np.tile(weights / n_copies, n_copies)
    n_trees = n_copies * len(release.trees)
    tree, leaf, output = np.unravel_index(np.arange(weights.size),
                                          (n_trees, n_leaves, n_outputs))
    floor = FLOOR_WEIGHT if release.task == "classification" and n_outputs == 1 else 0.0
    return ([*tree.tolist(), n_trees], [*(n_leaves - 1 + leaf).tolist(), 0],
            [*output.tolist(), 0], [*weights.tolist(), floor])


def _double_tensor(name: str, values: Any) -> Any:
    from onnx import TensorProto, helper

    flat = np.asarray(values, dtype=np.float64).reshape(-1)
    return helper.make_tensor(name, TensorProto.DOUBLE, [flat.size], flat.tolist())


def _class_labels(schema: PublicSchema) -> dict[str, list[Any]]:
    labels = schema.classes
    if all(isinstance(label, str) for label in labels):
        return {"classlabels_strings": labels}
    if all(isinstance(label, int) for label in labels):  # bools are ints: False/True → 0/1
        return {"classlabels_int64s": [int(label) for label in labels]}
    raise ValueError(f"ONNX class labels are all strings or all integers; the public label "
                     f"set {schema.labels!r} mixes them")


def to_onnx(release: ModelRelease) -> Any:
    """The release as an ``onnx.ModelProto`` (see the module docstring).

    Needs the ``onnx`` package (the ``onnx`` extra). Outputs: ``variable`` (the prediction,
    shape ``(N, 1)``) for regression; ``label`` and ``probabilities`` (one column a class,
    in the order of the public labels) for classification. ONNX's class labels are strings
    or integers, so a label set of ``False`` and ``True`` answers ``0`` and ``1``.

    Examples
    --------
    >>> import numpy as np
    >>> from renyiboost.models.batch import SGBDT
    >>> from renyiboost.schema import PublicSchema
    >>> schema = PublicSchema(features={"a": (0, 1)}, target_bounds=(0, 3))
    >>> X = np.random.default_rng(0).uniform(0, 1, (500, 1))
    >>> model = SGBDT(schema, epsilon=1.0, rounds=5, depth=2, seed=0).fit(X, 3 * X[:, 0])
    >>> onnx_model = to_onnx(model.release())   # doctest: +SKIP
    """
    try:
        from onnx import TensorProto, checker, helper
    except ImportError as missing:  # pragma: no cover - depends on the environment
        raise ImportError("ONNX export needs the onnx package: pip install 'renyiboost[onnx]'"
                          ) from missing
    release = release.check_whole()  # a model-topic message is one version's part
    schema = PublicSchema(**release.public_schema)
    n_outputs = schema.n_outputs if release.task == "classification" else 1
    base = np.atleast_1d(np.asarray(release.init_score, dtype=float))
    shifts = _shifts(release, schema)
    attributes: dict[str, Any] = _tree_attributes(release, schema, shifts)
    values = attributes.pop("nodes_values")
    attributes["nodes_values_as_tensor"] = _double_tensor("nodes_values", values)
    trees, nodes, outputs, weights = _leaf_targets(release, shifts.shape[0], n_outputs)
    if release.answer_map is not None:  # a·(base + Σ w) + b, folded into base and weights
        scale, offset = release.answer_map
        base = scale * base + offset
        weights = [*(scale * w for w in weights[:-1]), weights[-1]]  # not the floor tree
    X = helper.make_tensor_value_info("X", TensorProto.DOUBLE, [None, schema.n_features])
    numeric = ~schema.is_categorical  # a code outside the domain takes "other" unclipped
    bounds = [_double_tensor("lower", np.where(numeric, schema.lower, -np.inf)),
              _double_tensor("upper", np.where(numeric, schema.upper, np.inf))]
    clip_inputs = [  # as every other answer path clips; NaN (missing) compares false: kept
        helper.make_node("Less", ["X", "lower"], ["below"]),
        helper.make_node("Where", ["below", "lower", "X"], ["raised"]),
        helper.make_node("Greater", ["raised", "upper"], ["above"]),
        helper.make_node("Where", ["above", "upper", "raised"], ["X_clipped"]),
    ]
    extra: list[Any] = list(bounds)
    if release.task == "regression":
        lo, hi = schema.target_bounds  # type: ignore[misc]
        ensemble = helper.make_node(
            "TreeEnsembleRegressor", ["X_clipped"], ["margin"], domain="ai.onnx.ml", n_targets=1,
            target_treeids=trees, target_nodeids=nodes, target_ids=outputs,
            target_weights_as_tensor=_double_tensor("target_weights", weights),
            base_values_as_tensor=_double_tensor("base_values", base),
            aggregate_function="SUM", post_transform="NONE", **attributes)
        # the ensemble's margin (in [−1, 1]) is float32; it is scaled to the target in
        # double, since float32 spaces 1.7e9 by 128 (bounds far from 0 lost most of their
        # range: a timestamp target was off by 64 in a range of 100)
        constants = {"minus_one": -1.0, "one": 1.0, "half_range": (hi - lo) / 2.0, "lo": lo}
        extra += [helper.make_tensor(name, TensorProto.DOUBLE, [], [value])
                  for name, value in constants.items()]
        nodes_list = [
            ensemble,
            helper.make_node("Cast", ["margin"], ["margin_double"], to=TensorProto.DOUBLE),
            helper.make_node("Clip", ["margin_double", "minus_one", "one"], ["clipped"]),
            helper.make_node("Add", ["clipped", "one"], ["shifted"]),
            helper.make_node("Mul", ["shifted", "half_range"], ["scaled"]),
            helper.make_node("Add", ["scaled", "lo"], ["variable"]),
        ]
        graph_outputs = [helper.make_tensor_value_info("variable", TensorProto.DOUBLE,
                                                       [None, 1])]
    else:
        binary = n_outputs == 1
        labels = _class_labels(schema)
        label_type = (TensorProto.STRING if "classlabels_strings" in labels
                      else TensorProto.INT64)
        nodes_list = [helper.make_node(
            "TreeEnsembleClassifier", ["X_clipped"], ["label", "probabilities"],
            domain="ai.onnx.ml",
            class_treeids=trees, class_nodeids=nodes,
            # binary: one score a leaf (the positive class's log-odds, class id 0 as for
            # two labels the runtime reports [1 − σ(s), σ(s)])
            class_ids=outputs,
            class_weights_as_tensor=_double_tensor("class_weights", weights),
            base_values_as_tensor=_double_tensor("base_values", base),
            post_transform="LOGISTIC" if binary else "SOFTMAX", **labels, **attributes)]
        graph_outputs = [
            helper.make_tensor_value_info("label", label_type, [None]),
            helper.make_tensor_value_info("probabilities", TensorProto.FLOAT,
                                          [None, schema.n_classes])]
    graph = helper.make_graph([*clip_inputs, *nodes_list], f"renyiboost_{release.model}",
                              [X], graph_outputs, initializer=extra)
    model = helper.make_model(graph, producer_name="renyiboost", opset_imports=[
        helper.make_opsetid("", ONNX_OPSET), helper.make_opsetid("ai.onnx.ml", ML_OPSET)])
    model.doc_string = ("A renyiboost public release: DP trees over schema-encoded inputs "
                        "(see renyiboost.export)." + (
                            " SEEDED FOR TESTING ONLY: its noise came from a fixed seed, so "
                            "it protects no one." if release.guarantee.seeded_for_testing
                            else ""))
    helper.set_model_props(model, {
        "renyiboost.format": release.format, "model": release.model,
        "version": str(release.version), "store_id": str(release.store_id),
        "epoch": str(release.epoch), "task": release.task,
        "public_schema": schema.model_dump_json(),
        "privacy_guarantee": release.guarantee.model_dump_json()})
    checker.check_model(model)
    return model
