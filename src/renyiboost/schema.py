"""The public schema: feature bounds, category domains and target bounds.

Everything here is a *public input* (DEVELOPERS invariant 1). The random trees draw their
splits from these bounds only, and the leaves clip labels with the target bounds, so none of
it may be read from the training records. :meth:`PublicSchema.from_data` exists for
exploration only and says so with a :class:`~renyiboost.exceptions.PrivacyLeakWarning`.

Encoding convention (one float matrix for every feature):

* numeric feature: the value, clipped to ``[lo, hi]``;
* categorical feature: the index of the value in the public domain; a value outside the
  domain gets the index ``len(domain)`` (the "other" branch);
* a missing value is ``NaN`` in both cases; trees send it down a fixed branch.
"""

from __future__ import annotations

import decimal
import itertools
import math
import numbers
import sys
import warnings
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property
from typing import Any

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    SerializerFunctionWrapHandler,
    field_validator,
    model_serializer,
    model_validator,
)

from renyiboost.exceptions import InvalidRecord, PrivacyLeakWarning, outside_stacklevel

Category = str | int | bool
_BOOLS = frozenset({bool, np.bool_})
FeatureSpec = tuple[float, float] | list[Category]


def object_vector(values: Any) -> np.ndarray:
    """``values`` as a 1-D object array, one element per label. An array is flattened as
    it is; any other sequence is read element by element, so that labels which are
    themselves sequences (``["pos"]``) stay single, wrong labels instead of becoming a
    second axis that changes the number of labels."""
    if isinstance(values, np.ndarray):
        return values.astype(object, copy=False).reshape(-1)
    if isinstance(values, str | bytes) or not isinstance(values, Iterable):
        return np.array([values], dtype=object)
    items = list(values)
    return np.fromiter(items, dtype=object, count=len(items))


#: Tags a bool category in a category index (:func:`category_key`).
BOOL_CATEGORY = "renyiboost.bool"
#: The largest magnitude a public bound may have. Splits, leaf values and noise are computed
#: on the bounds' width and midpoint: bounds of ±1e308 made thresholds infinite (accuracy
#: 0.47 where ±1e30 gave 0.95) and exports unreadable, and target bounds of ±8e307
#: predicted inf. 1e300 leaves that arithmetic eight orders of magnitude of room and is far
#: beyond any quantity a schema describes; an "unbounded" feature needs real bounds anyway,
#: since the trees split evenly between them.
MAX_BOUND = 1e300


_BOUNDS_RULE = f"bounds must be finite numbers lo < hi of magnitude at most {MAX_BOUND:g}"


def _bounds_ok(lo: float, hi: float) -> bool:
    """Whether ``(lo, hi)`` are public bounds the model's arithmetic can use
    (:data:`MAX_BOUND`); NaN fails every comparison."""
    return -MAX_BOUND <= lo < hi <= MAX_BOUND


def pandas_na() -> Any:
    """pandas' ``NA`` if pandas is loaded (a caller holding an ``NA`` has loaded it), else
    ``None``: the check never imports pandas."""
    return getattr(sys.modules.get("pandas"), "NA", None)


def is_missing(value: Any) -> bool:
    """Whether ``value`` marks a missing value besides ``None`` (which callers test first,
    on their fast paths): NaN of any float width, a ``Decimal`` NaN (quiet or signaling:
    a SQL ``NUMERIC`` may hold one), or pandas' ``NA``."""
    if isinstance(value, float | np.floating):
        return bool(np.isnan(value))
    if isinstance(value, decimal.Decimal):
        return value.is_nan()
    return value is not None and value is pandas_na()


def _numbers_of_frame(X: Any) -> np.ndarray:
    """``X`` as an array: a frame or series of numbers as floats at once, pandas' ``NA`` of
    a nullable ``Int64``, ``Float64`` or ``boolean`` column as NaN; a list as numbers when
    numpy makes numbers of it (its bools are looked for in the list itself:
    :meth:`PublicSchema._refuse_bool_codes`), else as objects; anything else as
    ``np.asarray`` gives it (objects are converted by :func:`as_floats`; strings and dates
    stay, and the caller refuses them: a frame's conversion to floats would have parsed
    ``"0.2"``)."""
    dtypes = getattr(X, "dtypes", None)
    if dtypes is not None and hasattr(X, "to_numpy"):
        kinds = [getattr(d, "kind", "O") for d in (dtypes if X.ndim == 2 else [dtypes])]
        if all(kind in "biuf" for kind in kinds):
            return np.asarray(X.to_numpy(dtype=float, na_value=np.nan))
    if isinstance(X, list | tuple):
        try:
            raw = np.asarray(X)
        except ValueError:  # rows of different lengths: objects, refused by the caller
            return np.asarray(X, dtype=object)
        return raw if raw.dtype.kind in "biufUSV" else np.asarray(X, dtype=object)
    return np.asarray(X)


#: numpy's dates and durations: ``float()`` takes a ``np.timedelta64`` (its count of its
#: unit) and ``np.timedelta64`` counts as a ``numbers.Integral``, so they are refused by
#: type wherever a number is read.
DATE_SCALARS = np.timedelta64 | np.datetime64


def as_floats(values: np.ndarray) -> np.ndarray:
    """``values`` as a new float array, missing values (``None``, NaN, a ``Decimal`` NaN,
    pandas' ``NA``: :func:`is_missing`) as NaN. numpy converts ``None`` itself; an object
    array that it refuses is judged element by element only then (pandas' ``NA``), so a
    column of numbers and ``None`` costs no Python step per value. Raises ``TypeError`` or
    ``ValueError`` for a value that is no number (callers name it: :func:`not_a_number`)."""
    if values.dtype.kind == "O" and any(isinstance(v, DATE_SCALARS) for v in values.flat):
        raise TypeError("a date or duration is no number")  # float() would take it
    try:
        return np.array(values, dtype=float)
    except (TypeError, ValueError):
        if values.dtype.kind != "O":
            raise
    missing = np.fromiter((v is None or is_missing(v) for v in values.flat), bool,
                          values.size).reshape(values.shape)
    values = values.copy()
    values[missing] = np.nan
    return np.array(values, dtype=float)


def not_a_number(values: np.ndarray) -> tuple[tuple[int, ...], Any]:
    """The index and value of the first element of ``values`` that is neither missing nor
    taken by ``float`` (a message's example, after :func:`as_floats` failed)."""
    for index in np.ndindex(values.shape):
        value = values[index]
        if isinstance(value, DATE_SCALARS):
            return index, value
        if value is None or is_missing(value):
            continue
        try:
            float(value)
        except (TypeError, ValueError):
            return index, values[index]
    return (0,) * values.ndim, values.flat[0]


def names_a_category(value: Any) -> bool:
    """Whether ``value`` may name a category: a string, an integer or a bool, not a date
    or a duration (``np.timedelta64`` counts as an integer). Anything else (a fraction, a
    complex number, a date, pandas' ``NaT``) is refused where a category is read, by the
    stream and by :meth:`PublicSchema.encode_columns` alike."""
    return isinstance(value, str | numbers.Integral | np.bool_) and not isinstance(
        value, DATE_SCALARS)


def whole_number(value: Any) -> bool:
    """Whether ``value`` is a float holding an integer that a float holds exactly (up to
    2**53), which a categorical feature reads as that integer: pandas stores integer
    categories with a gap as floats. NaN, ±inf and fractions are not."""
    return (isinstance(value, float | np.floating) and abs(value) <= 2.0**53
            and float(value).is_integer())


def named_columns(columns: Mapping[Any, Any]) -> dict[str, Any]:
    """``columns`` keyed by their names as strings (River's rows name features 0, 1, …, and
    a schema names them "0", "1", …); two names that are one string are refused
    (``InvalidRecord``, reason ``schema``, a ``ValueError``)."""
    named: dict[str, Any] = {}
    given: dict[str, Any] = {}
    for name, column in columns.items():
        key = name if isinstance(name, str) else str(name)
        if key in named:
            raise InvalidRecord("schema", f"feature {key!r} is given twice, as "
                                          f"{given[key]!r} and as {name!r}")
        named[key], given[key] = column, name
    return named


#: The types of values that always may name a category (:func:`names_a_category`), or mark
#: a missing one.
_CATEGORY_TYPES = frozenset({str, np.str_, int, bool, np.bool_, type(None)})


def _holds_bools(column: np.ndarray) -> bool:
    """Whether a column's values are bools (its dtype's, or one of an object column's)."""
    return column.dtype.kind == "b" or (column.dtype.kind == "O" and any(
        isinstance(v, bool | np.bool_) for v in column))


def categories_preview(categories: Sequence[Any], shown: int = 4) -> str:
    """The first ``shown`` categories of a feature, for a message (``"'x', 'y', …"``)."""
    return (", ".join(repr(c) for c in categories[:shown])
            + (", …" if len(categories) > shown else ""))


def category_key(value: Any) -> Any:
    """A category value as a category index holds it: a bool (Python's or numpy's) is
    tagged, so that ``True`` is not the category ``1`` nor ``1`` the category ``True``
    (Python's ``True == 1`` made one the other), as a label set keeps them apart.

    >>> category_key(True), category_key(1), category_key(np.True_)
    (('renyiboost.bool', True), 1, ('renyiboost.bool', True))
    """
    if isinstance(value, bool | np.bool_):
        return (BOOL_CATEGORY, bool(value))
    return value


class PublicSchema(BaseModel):
    """Public description of the features and, for regression, of the target.

    Parameters
    ----------
    features
        Maps each feature name to ``(lo, hi)`` for a numeric feature or to the list of
        allowed values for a categorical one. The order of the mapping is the column order.
        Two numbers, in a list or a tuple, are always a numeric feature's bounds (as a
        TOML or JSON config writes them). A feature of two integer codes is best declared
        by its bounds, ``(1, 5)``: a tree's threshold between them splits them as the two
        categories would, and records that say ``1`` or ``5`` match. As strings
        (``["1", "5"]``) it would match only records that say ``"1"`` or ``"5"``; an
        integer record would take the "other" branch.
        Names are kept as strings (``0`` becomes ``"0"``; a record may still say ``0``);
        two names that are one string, such as ``0`` and ``"0"``, are refused.
    target_bounds
        ``(lo, hi)`` of a regression target; ``None`` for classification.
    labels
        The public label set of a classifier, in a fixed order: a list or tuple (a set has
        no fixed order) of JSON scalars (strings, integers, booleans; a bool label matches
        only a bool member, so ``True`` is not the class ``1``). Two labels make a binary model whose positive class is the
        second; three or more a multiclass (softmax) model. ``None``: binary labels 0/1 (or
        False/True). Like bounds, it is never read from the data: a class that a data set
        happens to lack would otherwise be told apart from one it has.

    Examples
    --------
    >>> schema = PublicSchema(features={"age": (0, 100), "sex": ["F", "M"]})
    >>> schema.encode_columns({"age": [130], "sex": ["X"]})
    array([[100.,   2.]])
    """

    # a misspelt field (``label=``, ``target_bound=``) was dropped without a word: a binary
    # model of 0/1 instead of the named classes (review P #6)
    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True, extra="forbid")

    features: dict[str, FeatureSpec]
    target_bounds: tuple[float, float] | None = None
    labels: list[Category] | None = None
    #: Set by :meth:`from_data` only: the bounds are the data's own extremes, which no
    #: guarantee covers. Dumped (and so released with every model) only when set, so that a
    #: reader of a release sees what its ε does not cover.
    bounds_read_from_data: bool = False

    def model_copy(self, *, update: Mapping[str, Any] | None = None,
                   deep: bool = False) -> PublicSchema:
        """A copy; one with ``update`` is built anew, validated and without the original's
        cached readings (pydantic's copy kept them: a binary schema's label reading stayed
        on a copy given seven labels, and a bool label passed as class 1: review L #2)."""
        if update:
            return type(self)(**{**self.model_dump(), **update})
        return super().model_copy(deep=deep)

    @field_validator("features", mode="before")
    @classmethod
    def _normalise_features(cls, value: Any) -> Any:
        if not isinstance(value, Mapping) or not value:
            raise ValueError("features must be a non-empty mapping name -> (lo, hi) or [values]")
        normalised: dict[str, Any] = {}
        given: dict[str, Any] = {}  # name as a string -> the name as given
        for name, spec in value.items():
            key = name if isinstance(name, str) else str(name)
            if key in given:
                raise ValueError(f"features: the names {given[key]!r} and {name!r} are both "
                                 f"{key!r} as strings (a record's names are matched as "
                                 "strings): give every feature a distinct name")
            given[key] = name
            if isinstance(spec, tuple | list) and len(spec) == 2 and all(
                isinstance(v, numbers.Real) and not isinstance(v, bool | np.bool_)
                for v in spec  # numpy's numbers too (np.int64 bounds were refused: review R)
            ):
                lo, hi = float(spec[0]), float(spec[1])
                if not _bounds_ok(lo, hi):
                    raise ValueError(f"feature {name!r}: {_BOUNDS_RULE}, got {spec!r}")
                normalised[key] = (lo, hi)
            elif isinstance(spec, tuple):
                # a tuple is the (lo, hi) of a numeric feature: (0, 50, 100) or ("0", "100")
                # was read as categories, and every real value took the "other" branch
                raise ValueError(
                    f"feature {name!r}: a tuple gives a numeric feature's bounds (lo, hi), two "
                    f"numbers; got {spec!r}. Categories are a list: [value, value, ...]")
            elif isinstance(spec, list) and len(spec) == 1:
                raise ValueError(
                    f"feature {name!r}: a categorical feature needs at least two values, got "
                    f"{spec!r} (one value cannot split; a numeric feature takes (lo, hi))")
            elif isinstance(spec, list) and len(spec) > 0:
                values = list(spec)
                try:  # 1 and True are two categories, as a category index keeps them
                    unique = len({category_key(v) for v in values}) == len(values)
                except TypeError:  # a list or a dict among them: refused by type below
                    unique = True  # (it was a bare "unhashable type": review T #7)
                if not unique:
                    raise ValueError(f"feature {name!r}: category values must be unique")
                normalised[key] = values
            else:
                raise ValueError(
                    f"feature {name!r}: expected (lo, hi) with two numbers or a non-empty list "
                    f"of category values, got {spec!r}"
                )
        return normalised

    @field_validator("target_bounds")
    @classmethod
    def _check_target_bounds(cls, value: tuple[float, float] | None) -> Any:
        if value is not None:
            lo, hi = value
            if not _bounds_ok(lo, hi):
                raise ValueError(f"target_bounds: {_BOUNDS_RULE}, got {value!r}")
        return value

    @field_validator("labels", mode="before")
    @classmethod
    def _labels_in_order(cls, value: Any) -> Any:
        """Only a list or tuple has the fixed order a label set needs: a set's order
        depends on the hash seed (the positive class would change between runs, and a
        store would refuse the restart), and a string would be read letter by letter."""
        if value is None:
            return value
        if not isinstance(value, list | tuple):  # a ValueError: what pydantic reports
            raise ValueError(  # noqa: TRY004
                f"labels must be a list or tuple of the classes in a fixed order, got "
                f"{type(value).__name__} {value!r:.80}")
        odd = [label for label in value  # a bool is an integer; numpy scalars are welcome
               if not isinstance(label, str | numbers.Integral | np.bool_)]
        if odd:  # a float (2.0 became the class 2, 0.5 a nine-error dump), None, a list, ...
            raise ValueError(f"labels must be strings, integers or booleans, got "
                             f"{type(odd[0]).__name__} {odd[0]!r:.40}: a class is matched "
                             "exactly, and a float label set has no exact match")
        return value

    @field_validator("labels")
    @classmethod
    def _check_labels(cls, value: list[Category] | None) -> Any:
        if value is not None:
            if len(value) < 2:
                raise ValueError(f"labels must list at least two classes, got {value!r}")
            if len(set(value)) != len(value):  # also catches 1 and True, which hash alike
                raise ValueError(f"labels must be unique (1 and True count as one), got "
                                 f"{value!r}")
        return value

    @model_validator(mode="after")
    def _at_least_one(self) -> PublicSchema:
        if not self.features:
            raise ValueError("features must name at least one feature")
        if self.labels is not None and self.target_bounds is not None:
            raise ValueError("a schema has target_bounds (regression) or labels "
                             "(classification), not both")
        return self

    @model_serializer(mode="wrap")
    def _omit_absent_labels(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Without a label set, or bounds read from the data, the dump is what it was before
        either existed, so the fingerprints that stores pin and earlier releases stay the
        same."""
        out = handler(self)
        if out.get("labels", 0) is None:
            del out["labels"]
        if not out.get("bounds_read_from_data", True):
            del out["bounds_read_from_data"]
        return out

    # ------------------------------------------------------------------ labels
    @property
    def n_classes(self) -> int:
        """Classes of a classifier: ``len(labels)``, or 2 (labels 0/1) without a label set."""
        return 2 if self.labels is None else len(self.labels)

    @property
    def n_outputs(self) -> int:
        """Margins a model of this schema has per row: C for a multiclass label set (softmax
        over C margins), else 1 (a regression value or binary log-odds)."""
        return self.n_classes if self.n_classes > 2 else 1

    @cached_property
    def classes(self) -> list[Category]:
        """The labels in class order: ``labels``, or ``[False, True]`` without a set."""
        return list(self.labels) if self.labels is not None else [False, True]

    @cached_property
    def label_index(self) -> dict[Any, int]:
        """Label → class index (without a set: 0/1, which False/True and 0.0/1.0 match)."""
        return {label: code for code, label in enumerate(self.classes)}

    @cached_property
    def label_is_bool(self) -> tuple[bool, ...] | None:
        """Per class of a public label set, whether it is a bool; ``None`` when no label
        can be mistaken for another kind (no set, or only strings). A bool label matches
        only a bool class and any other label only a non-bool one: ``True == 1`` (and
        they hash alike), so a dict lookup alone would take ``True`` for the class ``1``
        of ``[0, 1, 2]`` and ``1`` for the class ``True`` of ``[False, True]``."""
        if self.labels is None or all(isinstance(c, str) for c in self.labels):
            return None
        return tuple(type(c) in _BOOLS for c in self.labels)

    def label_codes(self, y: Any) -> np.ndarray:
        """Each label's index in the public label set, −1 for a label outside it (or an
        unhashable value): ``dict.get`` mapped over the labels in C, as
        :meth:`encode_columns` encodes a categorical column; then a bool that met a
        non-bool class, or the reverse, is outside too (:attr:`label_is_bool`)."""
        values = object_vector(y)
        index = self.label_index
        try:
            codes = np.fromiter(map(index.get, values, itertools.repeat(-1)), dtype=np.int64,
                                count=values.size)
        except TypeError:  # an unhashable value: not a label
            codes = np.array([self._code_or_missing(v) for v in values], dtype=np.int64)
        if self.label_is_bool is not None and codes.size:
            codes[(codes >= 0) & (self._given_bools(y, values)
                                  != np.array(self.label_is_bool)[codes])] = -1
        return codes

    @staticmethod
    def _given_bools(y: Any, values: np.ndarray) -> np.ndarray | bool:
        """Whether each label is a bool (one answer for all when they are all alike): from
        the dtype of an array, else from the set of the labels' types, element by element
        only for a mix."""
        if isinstance(y, np.ndarray) and y.dtype.kind != "O":
            return y.dtype.kind == "b"
        kinds = set(map(type, values))
        if not kinds & _BOOLS:
            return False
        if kinds <= _BOOLS:
            return True
        return np.fromiter(map(_BOOLS.__contains__, map(type, values)), dtype=bool,
                           count=values.size)

    def _code_or_missing(self, value: Any) -> int:
        try:
            return self.label_index.get(value, -1)
        except TypeError:
            return -1

    def label_of(self, code: int) -> Any:
        """The label of class ``code`` (``False``/``True`` without a label set)."""
        return self.classes[code]

    # ------------------------------------------------------------------ columnar views
    @cached_property
    def names(self) -> list[str]:
        return list(self.features)

    @property
    def n_features(self) -> int:
        return len(self.features)

    @cached_property
    def is_categorical(self) -> np.ndarray:
        return np.array([isinstance(s, list) for s in self.features.values()], dtype=bool)

    @property
    def n_numeric(self) -> int:
        """Numeric features (each with public bounds)."""
        return int(np.count_nonzero(~self.is_categorical))

    @cached_property
    def lower(self) -> np.ndarray:
        """Lower public bound per column (0 for a categorical column's codes)."""
        return np.array(
            [0.0 if isinstance(s, list) else s[0] for s in self.features.values()], dtype=float
        )

    @cached_property
    def upper(self) -> np.ndarray:
        """Upper public bound per column (the "other" code for a categorical column)."""
        return np.array(
            [float(len(s)) if isinstance(s, list) else s[1] for s in self.features.values()],
            dtype=float,
        )

    @cached_property
    def n_categories(self) -> np.ndarray:
        """Size of the public domain per column (0 for numeric columns)."""
        return np.array(
            [len(s) if isinstance(s, list) else 0 for s in self.features.values()], dtype=np.int64
        )

    @cached_property
    def _category_index(self) -> dict[str, dict[Any, int]]:
        """Per categorical feature, :func:`category_key` of each category → its code."""
        return {
            name: {category_key(v): i for i, v in enumerate(spec)}
            for name, spec in self.features.items()
            if isinstance(spec, list)
        }

    # ------------------------------------------------------------------ encoding
    @cached_property
    def _encoders(self) -> list[tuple[str, dict[Any, int] | None, float, float]]:
        """Per column: name, category index (None if numeric), lower and upper bound."""
        return [
            (name, self._category_index.get(name), float(lo), float(hi))
            for name, lo, hi in zip(self.names, self.lower, self.upper, strict=True)
        ]

    def encode_columns(self, columns: Mapping[str, Sequence[Any] | np.ndarray] | Any,
                       outside: np.ndarray | None = None,
                       n_rows: int | None = None) -> np.ndarray:
        """Encode a column mapping or a data frame into a float matrix.

        Vectorised per column; a missing column is all-missing, and so is ``None``, NaN or
        pandas' ``NA`` in any column; a data frame's column names are matched as strings,
        and a column (or a mapping's key) the schema does not name is refused
        (``ValueError``: a misspelled one left its feature all-missing without a word); a
        mapping's names are matched as strings too (River's rows name features 0, 1, …).
        Numeric values are trusted here (:class:`~renyiboost.validation.RecordValidator`
        judges them first); a categorical value that can name no category is refused
        (:meth:`_refuse_non_categories`). Values are encoded as
        :meth:`RecordValidator.features` encodes one record, bit for bit (a value inside the
        bounds is kept as it is: ``np.clip`` would turn −0.0 on a bound of 0 into 0.0).
        ``outside`` (per column), if given, is increased by the values outside the public
        bounds or domain (clipped, or sent to "other"). ``n_rows`` is the number of rows
        when ``columns`` may be empty (rows with no feature at all: every value missing).
        """
        if not isinstance(columns, Mapping) and hasattr(columns, "columns"):
            frame = columns
            names = [str(name) for name in frame.columns]
            if len(set(names)) != len(names):
                raise ValueError(f"the frame names a column twice ({names!r:.120}): each "
                                 "feature is one column")
            columns = {name: frame.iloc[:, i] for i, name in enumerate(names)}
            n_rows = len(frame) if n_rows is None else n_rows
        elif any(type(name) is not str for name in columns):  # River's {0: …} rows' names
            columns = named_columns(columns)
        unknown = [name for name in columns if name not in self.features]
        if unknown:  # a mapping's misspelled key too: its feature was all-missing (review B)
            raise ValueError(f"column {unknown[0]!r} is not a feature of the schema "
                             f"({', '.join(map(repr, self.names[:8]))}"
                             f"{', …' if self.n_features > 8 else ''})")
        lengths = {len(c) for c in columns.values()}
        if n_rows is not None:
            lengths.add(n_rows)
        if len(lengths) > 1:
            raise ValueError(f"columns have different lengths: {sorted(lengths)}")
        n = lengths.pop() if lengths else 0
        out = np.full((n, self.n_features), np.nan, dtype=float)
        for j, name in enumerate(self.names):
            if name not in columns:
                continue
            spec = self.features[name]
            col = columns[name]
            if isinstance(spec, list):
                if getattr(getattr(col, "dtype", None), "kind", "O") in "mM":
                    raise ValueError(f"feature {name!r} is categorical, got a column of "
                                     f"{col.dtype}: give dates as categories (strings)")
                index = self._category_index[name]
                out[:, j] = [math.nan if v is None else index.get(category_key(v), len(spec))
                             for v in col]
                other = np.flatnonzero(out[:, j] == len(spec))  # NaN and NA land here too
                if other.size:  # by position: a Series' [] would read its index labels
                    given = np.asarray(col, dtype=object)[other]
                    missing = [is_missing(v) for v in given]
                    out[other[missing], j] = math.nan
                    if getattr(getattr(col, "dtype", None), "kind", "O") not in "iubUS":
                        self._refuse_non_categories(name, other, given, missing)
                if outside is not None:
                    outside[j] += np.count_nonzero(out[:, j] == len(spec))
            else:
                raw = self._numeric_column(name, col)
                lo, hi = float(spec[0]), float(spec[1])
                below, above = raw < lo, raw > hi  # NaN (missing): neither
                out[:, j] = np.where(below, lo, np.where(above, hi, raw))
                if outside is not None:
                    outside[j] += np.count_nonzero(below | above)
        return out

    @staticmethod
    def _refuse_non_categories(name: str, rows: np.ndarray, given: np.ndarray,
                               missing: list[bool]) -> None:
        """Refuse a value outside a categorical feature's domain that cannot name a
        category (:func:`names_a_category`; a whole-number float reads as its integer, as
        the stream reads it): a date, ``NaT``, a fraction or a complex number went to
        "other" here while the stream refused it. Values of the plain types (strings,
        Python integers and bools, ``None``) are passed over at once: a validated column
        of 300,000 values outside the domain took twice as long without that (review D)."""
        if {type(value) for value in given} <= _CATEGORY_TYPES:
            return
        for row, value, gone in zip(rows, given, missing, strict=True):
            if not (gone or whole_number(value) or names_a_category(value)):
                raise ValueError(f"feature {name!r} is categorical: expected a string, "
                                 f"integer or bool, got {type(value).__name__} "
                                 f"{value!r:.40} in row {row}")

    @staticmethod
    def _numeric_column(name: str, column: Any) -> np.ndarray:
        """A numeric feature's column as floats, its missing values (pandas' ``NA`` in an
        object or nullable column too) NaN; a column of dates or durations, or a value no
        number conversion takes, is refused (``ValueError`` naming the feature): a date
        column was read as nanoseconds, and its ``NaT`` as the lower bound."""
        values = (np.asarray(column.to_numpy(dtype=float, na_value=np.nan))
                  if getattr(getattr(column, "dtype", None), "kind", "O") in "biuf"
                  and hasattr(column, "to_numpy") else np.asarray(column))
        if values.dtype.kind in "mMc":
            raise ValueError(f"feature {name!r} is numeric, got a column of {values.dtype}: "
                             "give dates and durations as numbers (e.g. days)")
        if values.ndim != 1:
            raise ValueError(f"feature {name!r}: a column holds one value a row, got shape "
                             f"{values.shape}")
        try:
            return as_floats(values)
        except (TypeError, ValueError):
            (row,), value = not_a_number(values)
            raise ValueError(f"feature {name!r} is numeric, got {type(value).__name__} "
                             f"{value!r:.40} in row {row}; check the rows with "
                             "RecordValidator(...).columns first") from None

    def in_schema_order(self, X: Any) -> Any:
        """A data frame whose column names are all strings, its columns put in the schema's
        order by name; anything else as it is (its columns are taken in order, as
        scikit-learn takes an array's). A frame with a column the schema does not name, or
        without one it names, is refused (``ValueError``): matched by position, swapped
        columns fed each feature the other's values, and misspelled ones passed unnoticed.
        Labels that are not all strings are matched by their text when they read as the
        features' names (River's integer names, as a stream's rows are: a frame whose
        integer labels were the names in another order was taken by position, the
        features silently swapped, review R); 0, 1, … that name none of the features are an
        unnamed frame's, taken by position; others are refused (labels naming some
        features but not all, 0, 1, … where the features are named "1", "0", …: by name and
        by position they disagree; a MultiIndex), which position could swap.

        >>> schema = PublicSchema(features={"a": (0, 1), "b": (0, 10)})
        >>> import pandas as pd
        >>> schema.in_schema_order(pd.DataFrame({"b": [5.0], "a": [0.5]})).columns.tolist()
        ['a', 'b']
        """
        columns = getattr(X, "columns", None)
        if columns is None:
            return X
        if not all(isinstance(c, str) for c in columns):
            labels = list(columns)
            texts = [str(c) for c in labels]
            if len(set(texts)) == len(texts) and set(texts) == set(self.names):
                if texts == list(self.names):
                    return X
                if labels != list(range(len(labels))):
                    return X[[labels[texts.index(name)] for name in self.names]]
                # 0, 1, … are also an unnamed frame's (an array in the schema's order): with
                # digit names in another order, name and position disagree (review D3)
            if labels == list(range(len(labels))) and not set(texts) & set(self.names):
                return X  # an unnamed frame's 0, 1, …: taken by position
            raise ValueError(
                f"X's column labels {labels!r:.120} are not all strings, and they read "
                f"neither as the features {list(self.names)!r:.120} alone nor as an unnamed "
                "frame's 0, 1, … (by name and by position they would feed a feature "
                "different values): name the columns with the features' names as strings, "
                "or pass an array (columns in the schema's order)")
        given = list(columns)
        if given == list(self.names):
            return X
        missing = [name for name in self.names if name not in given]
        unknown = [name for name in given if name not in self.names]
        if missing or unknown or len(set(given)) != len(given):
            raise ValueError(
                f"X's columns must be the schema's features {list(self.names)}, matched by "
                f"name: missing {missing}, not in the schema {unknown}"
                + ("" if len(set(given)) == len(given) else ", and some named twice"))
        return X[list(self.names)]

    def clip_encoded(self, X: np.ndarray, outside: np.ndarray | None = None,
                     one_row: bool = False) -> np.ndarray:
        """Validate and clip an already encoded float matrix (codes for categoricals).

        Numeric columns are clipped to their bounds; a categorical column holds codes (a
        negative, fractional or too large number, or a bool, is refused: ``ValueError``).
        NaN marks a missing value and is kept (pandas' ``NA`` is one); ±inf is refused, as a
        record's features refuse it. ``outside`` (per column), if
        given, is increased by the values outside the public bounds or domain (clipped, or
        "other"), as in :meth:`encode_columns`. A data frame's columns are matched to the
        features by name (:meth:`in_schema_order`); ``one_row``: a 1-D ``X`` is one row.
        """
        if one_row and hasattr(X, "to_frame") and not hasattr(X, "columns"):
            X = X.to_frame().T  # a Series: its values named, one row (read by position, a
            # Series in another order answered with the features swapped)
        ordered = self.in_schema_order(X)
        raw = _numbers_of_frame(ordered)
        if one_row:
            raw = np.atleast_2d(raw)
        if raw.dtype.kind in "USVcmM" or (raw.dtype.kind == "O" and any(
                isinstance(v, str | bytes) for v in raw.flat)):
            raise ValueError(f"X must be a matrix of numbers (a category as its code in "
                             f"the public domain, see encode_columns), got dtype {raw.dtype}")
        self._refuse_bool_codes(ordered, raw)
        try:
            X = as_floats(raw)
        except (TypeError, ValueError):
            if raw.ndim != 2:
                raise ValueError(f"X must be a matrix of numbers, got {raw.ndim} dimensions "
                                 "(rows of different lengths?)") from None
            (row, col), value = not_a_number(raw)
            if isinstance(value, list | tuple | np.ndarray):
                raise ValueError(  # noqa: TRY004 - a shape error, as numpy's
                    "X must be a matrix of numbers: its rows have different lengths, or "
                    "a cell holds a sequence") from None
            raise ValueError(
                f"X[{row}, {col}] (feature {self.names[col] if col < self.n_features else '?'!r}"
                f") is {type(value).__name__} {value!r:.40}: X must be a matrix of "
                "numbers (NaN for a missing value; dates and durations as numbers, e.g. "
                "days)") from None
        if X.ndim != 2 or X.shape[1] != self.n_features:
            raise ValueError(
                f"X must have shape (n, {self.n_features}) for features {self.names}, "
                f"got {X.shape}"
            )
        infinite = np.isinf(X)
        if infinite.any():
            row, col = np.argwhere(infinite)[0].tolist()
            raise ValueError(f"X[{row}, {col}] (feature {self.names[col]!r}) is {X[row, col]}: "
                             f"{np.count_nonzero(infinite)} values of X are infinite; features "
                             "must be finite (NaN marks a missing value)")
        num = ~self.is_categorical
        lower, upper = self.lower[num], self.upper[num]
        if outside is not None:
            values = X[:, num]
            outside[num] += np.count_nonzero((values < lower) | (values > upper), axis=0)
        X[:, num] = np.clip(X[:, num], lower, upper)
        cat = self.is_categorical
        if cat.any():
            codes = X[:, cat]
            self._check_codes(codes, np.flatnonzero(cat))
            X[:, cat] = codes
            if outside is not None:
                outside[cat] += np.count_nonzero(codes == self.n_categories[cat], axis=0)
        return X

    def _refuse_bool_codes(self, ordered: Any, raw: np.ndarray) -> None:
        """Refuse a bool in a categorical column: it is a category's value, not its code, and
        as a number (``True`` is 1) it named whichever category has code 1 (``False`` for a
        domain ``[True, False]``) without a word. A numeric column takes a bool as 0 or 1,
        as scikit-learn does. ``ordered``: ``X`` as given (a frame's dtypes tell a bool
        column before its values become numbers); ``raw``: its values as an array."""
        cat = np.flatnonzero(self.is_categorical)
        if cat.size == 0:
            return
        if getattr(ordered, "ndim", 0) == 2 and hasattr(ordered, "iloc"):
            flagged = [j for j in cat if _holds_bools(np.asarray(ordered.iloc[:, j]))]
        elif isinstance(ordered, list | tuple) and raw.dtype.kind in "iuf" and raw.ndim == 2:
            # numpy made 1.0 of True: look in the list, at the categorical columns only
            flat = len(ordered) > 0 and not isinstance(ordered[0], list | tuple | np.ndarray)
            rows = [ordered] if flat else ordered  # one row, as a flat list
            flagged = [j for j in cat if j < raw.shape[1] and any(
                isinstance(row[j], bool | np.bool_) for row in rows)]
        else:  # an array, or a one-row series (its values, before they became numbers)
            values = np.atleast_2d(np.asarray(ordered) if hasattr(ordered, "iloc") else raw)
            flagged = [j for j in cat if values.ndim == 2 and values.shape[1] > j
                       and _holds_bools(values[:, j])]
        if flagged:
            name = self.names[flagged[0]]
            raise ValueError(
                f"X's column {flagged[0]} (feature {name!r}) holds bools, but a categorical "
                f"column holds codes (0 to {self.n_categories[flagged[0]] - 1} for "
                f"{categories_preview(list(self.features[name]))}): a bool is a category's "
                "value; encode values with encode_columns")

    def _check_codes(self, codes: np.ndarray, columns: np.ndarray) -> None:
        """Refuse what is not a code of a categorical column: a negative, fractional or too
        large number. Such a value is no category at all, outside the domain or in it: it was
        taken as "other" without a word at prediction (and with a warning about a value
        outside the domain at a fit), so a frame of raw values (``20`` for the category
        ``20``, whose code is ``1``) or pandas' ``-1`` for a missing category answered as
        "other" silently."""
        n_categories = self.n_categories[columns]
        bad = ((codes < 0) | (codes > n_categories) | (codes != np.round(codes))) & ~np.isnan(
            codes)
        if not bad.any():
            return
        row, j = np.argwhere(bad)[0].tolist()
        shown = categories_preview(list(self.features[self.names[columns[j]]]))
        raise ValueError(
            f"X[{row}, {columns[j]}] (feature {self.names[columns[j]]!r}) is {codes[row, j]:g}, "
            f"not a code of its public domain ({np.count_nonzero(bad)} of X's values are "
            f"not). A categorical column holds codes: 0 to {n_categories[j] - 1} for "
            f"{shown}, {n_categories[j]} for a value outside them, NaN for a "
            "missing one (pandas' -1 is not one); encode values with encode_columns")

    def decode_row(self, row: np.ndarray) -> dict[str, Any]:
        """Inverse of :meth:`encode_columns` for one row (clipped values stay clipped;
        "other" is None)."""
        out: dict[str, Any] = {}
        for j, (name, spec) in enumerate(self.features.items()):
            v = row[j]
            if math.isnan(v):
                continue
            if isinstance(spec, list):
                code = int(v)
                out[name] = spec[code] if code < len(spec) else None
            else:
                out[name] = float(v)
        return out

    # ------------------------------------------------------------------ the leak path
    @classmethod
    def from_data(
        cls,
        X: np.ndarray,
        names: Sequence[str] | None = None,
        y: np.ndarray | None = None,
    ) -> PublicSchema:
        """Read numeric bounds (and target bounds) from the data. Leaks privacy; warns.

        This is what the reference S-BDT code does silently; here it is an explicit opt-in
        that raises a :class:`PrivacyLeakWarning`, in the manner of diffprivlib, and marks
        the schema (:attr:`bounds_read_from_data`), so that every release of a model trained
        on it says so: the released bounds are the data's exact extremes.
        """
        warnings.warn(
            "feature bounds were read from the data; the privacy guarantee does not cover "
            "them. Pass public bounds to avoid this warning.",
            PrivacyLeakWarning,
            stacklevel=outside_stacklevel(),
        )
        X = np.asarray(X, dtype=float)
        names = list(names) if names is not None else [f"x{j}" for j in range(X.shape[1])]
        lo, hi = np.nanmin(X, axis=0), np.nanmax(X, axis=0)
        hi = np.where(hi > lo, hi, lo + 1.0)
        features = {n: (float(a), float(b)) for n, a, b in zip(names, lo, hi, strict=True)}
        target = None
        if y is not None:
            y = np.asarray(y, dtype=float)
            a, b = float(np.min(y)), float(np.max(y))
            target = (a, b if b > a else a + 1.0)
        return cls(features=features, target_bounds=target, bounds_read_from_data=True)
