"""One validator for every way a record comes in: ``learn_one``, ``learn_many``, Kafka events.

DEVELOPERS invariant 7: bad input gets a clear error (or a dead letter) with its reason,
never a silent fix. :class:`RecordValidator` holds the rules once; the River estimators call
it per record, and the Kafka parser (:mod:`renyiboost.connectors.events`) calls it per
message and checks (in tests) that its fast batch path accepts and rejects exactly the same.
A rejection is an :class:`~renyiboost.exceptions.InvalidRecord` (a ``ValueError``) whose
``reason`` is the dead-letter reason:

* ``schema`` — ``x`` is not a mapping, names a feature the public schema does not have (it
  would otherwise be ignored without a word; a name that is not a ``str``, such as River's
  ``0``, is matched as its string, as the schema stores names, and a record that gives one
  feature twice, as ``0`` and ``"0"``, is refused), or holds a value of the wrong kind: a numeric
  feature takes a finite real number (not a bool, not a string; ±inf is refused), a
  categorical one a string, integer or bool (a whole-number float is its integer). A value
  left out, ``None``, NaN or pandas' ``NA`` marks a missing value, in a dict as in a data
  frame's column (River's ``iter_pandas`` and its scalers hand NaN on).
  Numbers outside the public bounds are clipped and categories outside the public domain take
  the "other" branch: that is the schema's meaning of a bound, not an error.
* ``label`` — a regression label must be a finite real number inside the public
  ``target_bounds`` (no bools, no strings: ``"5"`` is refused everywhere); a classification
  label is a bool or the number 0 or 1, or a member of the public label set (a bool matches
  only a bool member and a number only a number: ``True`` is not the class ``1``).
* ``key`` / ``missing_key`` — see :func:`normalise_key`.

**Keys.** The unit of privacy is a key, so a key must mean one thing everywhere. Keys are
strings in Unicode NFC: a ``str`` is normalised to NFC, an integer becomes its decimal string
(so ``7`` and ``"7"`` are one key — merging can only make two records share one budget, never
split one budget in two), ``bytes`` (a Kafka message key) are decoded as UTF-8 (invalid UTF-8
is refused, never replaced). Empty keys and keys longer than :data:`MAX_KEY_CHARS`
characters are refused with reason ``key``.
"""

from __future__ import annotations

import decimal
import math
import numbers
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any, Literal, NoReturn

import numpy as np

from renyiboost.exceptions import InvalidRecord, SchemaMismatchWarning, outside_stacklevel
from renyiboost.schema import (
    DATE_SCALARS,
    PublicSchema,
    categories_preview,
    category_key,
    is_missing,
    named_columns,
    names_a_category,
    object_vector,
    whole_number,
)

#: Longest key accepted, in characters after NFC normalisation.
MAX_KEY_CHARS = 256
#: Bits of the largest integer key :func:`normalise_key` converts: any integer of more has
#: more than :data:`MAX_KEY_CHARS` digits (and one of over 4,300 digits made ``str()`` raise
#: a ``ValueError``, not an ``InvalidRecord``, and the record lost its position: review E).
MAX_KEY_BITS = math.ceil(MAX_KEY_CHARS * math.log2(10)) + 1


def rows_not_learned(bad: Mapping[int, InvalidRecord] | Sequence[tuple[int, InvalidRecord]],
                     n: int) -> InvalidRecord:
    """The error a batch call raises after learning its valid rows: how many of ``n`` rows
    were refused, and the first of them with its reason (``bad``: row → why)."""
    items = sorted(bad.items() if isinstance(bad, Mapping) else bad, key=lambda item: item[0])
    first, why = items[0]
    return InvalidRecord(why.reason, f"{len(items)} of {n} rows were not learned; row {first}: "
                                     f"{why.detail}")


def normalise_key(key: Any) -> str:
    """The canonical string of a key (see the module docstring); raises ``InvalidRecord``.

    Examples
    --------
    >>> normalise_key("Zoe\\u0308"), normalise_key(7), normalise_key(b"u1")
    ('Zoë', '7', 'u1')
    """
    if isinstance(key, str):
        # a subclass's own equality and hash found another key's ledger in memory, and the
        # store kept the plain text: two ledgers after a restart (review Y #3)
        name = key if type(key) is str else str.__str__(key)
    elif isinstance(key, bytes):
        try:
            name = key.decode("utf-8")
        except UnicodeDecodeError:
            raise InvalidRecord("key", f"key {key[:40]!r} is not valid UTF-8") from None
    elif isinstance(key, numbers.Integral) and not isinstance(key, bool | np.bool_):
        number = int(key)
        if number.bit_length() > MAX_KEY_BITS:  # str() refuses past 4,300 digits (ValueError)
            raise InvalidRecord("key", f"an integer key of {number.bit_length()} bits has "
                                       f"more than {MAX_KEY_CHARS} digits")
        name = str(number)
    else:
        raise InvalidRecord("key", f"keys must be str, int or bytes, got "
                                   f"{type(key).__name__} {key!r:.40}")
    if not name.isascii():
        name = unicodedata.normalize("NFC", name)
    if not name:
        raise InvalidRecord("key", "keys must not be empty")
    if len(name) > MAX_KEY_CHARS:
        raise InvalidRecord("key", f"key of {len(name)} characters is longer than "
                                   f"{MAX_KEY_CHARS}")
    return name


def already_canonical(keys: Sequence[str]) -> bool:
    """Whether every key (a ``str``) is non-empty ASCII of allowed length: each is then its
    own canonical form (the NFC form of ASCII is itself), so :func:`normalise_key` can be
    skipped for the whole batch (0.5 µs per key less; one string join, not a loop)."""
    if not keys:
        return True
    lengths = list(map(len, keys))
    return min(lengths) > 0 and max(lengths) <= MAX_KEY_CHARS and "".join(keys).isascii()


def normalise_keys(keys: Sequence[Any]) -> list[str]:
    """:func:`normalise_key` of every key, skipped for a batch that is
    :func:`already_canonical`."""
    if _canonical_strings(keys):
        return list(keys)
    return [normalise_key(key) for key in keys]


def _canonical_strings(keys: Sequence[Any]) -> bool:
    """Whether every key is a ``str`` that is its own canonical form (no loop)."""
    return set(map(type, keys)) <= {str} and already_canonical(keys)


def bad_keys(keys: Sequence[Any]) -> list[tuple[int, InvalidRecord]]:
    """``(index, why)`` of every key :func:`normalise_key` refuses (none for a batch that is
    :func:`already_canonical`, without a loop)."""
    if _canonical_strings(keys):
        return []
    out = []
    for i, key in enumerate(keys):
        try:
            normalise_key(key)
        except InvalidRecord as why:
            out.append((i, why))
    return out


def _date_labels(dtype: Any) -> InvalidRecord:
    """Why labels of a date or duration dtype are refused (their numbers are nanoseconds,
    or whatever unit the dtype has: never a label's)."""
    return InvalidRecord("label", f"labels of dtype {dtype} are dates or durations: give "
                                  "numbers (e.g. days) or a public label set's members")


def unicode_twin(value: Any, known: Iterable[Any]) -> str:
    """A note for an error about ``value`` when one of ``known`` differs from it only in
    Unicode normalisation (``"café"`` written with a combining accent): the two print alike,
    and the error read as if the name were missing (review T #4). Keys are normalised (NFC);
    names, categories and labels are the schema's, as written, so they are only pointed
    out."""
    if not isinstance(value, str) or value.isascii():
        return ""
    form = unicodedata.normalize("NFC", value)
    twin = next((k for k in known if isinstance(k, str) and k != value
                 and unicodedata.normalize("NFC", k) == form), None)
    return "" if twin is None else (
        f"; {value!r:.80} and the schema's {twin!r:.80} differ only in Unicode normalisation "
        f"(code points {[hex(ord(c)) for c in value][:12]} against "
        f"{[hex(ord(c)) for c in twin][:12]}): normalise the records (NFC) or the schema")


def require_aligned(X: Any, y: Any, keys: Any = None) -> None:
    """Refuse a pandas ``y`` or ``keys`` whose index is not ``X``'s (``ValueError``): rows,
    labels and keys are paired by position, so a ``y`` shuffled, sorted or reindexed apart
    from ``X`` gave rows other rows' labels without a word, and such ``keys`` charged one
    person's records to another's budget (review T #2). ``X`` a mapping of columns: each
    column that is a Series holds the rows in its index's order, so they, ``y`` and
    ``keys`` must share one index. Anything without an index passes (a list's ``.index``
    is a method)."""
    parts = list(X.values()) if isinstance(X, Mapping) else [X]
    indexes = [index for part in [*parts, y]
               if hasattr(index := getattr(part, "index", None), "equals")]
    if any(not index.equals(indexes[0]) for index in indexes[1:]):
        raise ValueError(
            "y's index is not X's (or X's columns have different ones): rows and labels "
            "are paired by position, so they must be in the same order; align them "
            "(y.loc[X.index], or reset_index(drop=True) on both)")
    index = getattr(keys, "index", None)
    if indexes and hasattr(index, "equals") and not index.equals(indexes[0]):
        raise ValueError(
            "keys' index is not X's: rows and keys are paired by position, so a key in "
            "another order charges one person's records to another's budget; align them "
            "(keys.loc[X.index], or reset_index(drop=True) on all)")


def vector(values: Any) -> np.ndarray:
    """``values`` as a numpy array, a list or tuple without numpy's merging of types: numpy
    made ``[1, "1"]`` two strings, ``[True, 2.0]`` two floats and ``[nan, "F"]`` the string
    ``"nan"`` and ``"F"``, so ``learn_many`` learned labels and values its ``learn_one``
    loop refuses or reads otherwise (review T #1), and one ragged label (``[0.5]``) failed
    the whole batch (review Y #1). A list of numbers only, of bools only or of strings only
    is converted by numpy (its fast paths); any other list becomes an object array of its
    own elements, judged one by one. Arrays, pandas objects and the rest go to numpy as
    before."""
    if not isinstance(values, list | tuple):
        return np.asarray(values)
    kinds = {type(value) for value in values}
    if (all(issubclass(kind, _NUMBERS) and not issubclass(kind, bool | np.bool_)
            for kind in kinds) or all(issubclass(kind, bool | np.bool_) for kind in kinds)
            or all(issubclass(kind, str) for kind in kinds)):
        return np.asarray(values)
    if any(issubclass(kind, list | tuple | np.ndarray) for kind in kinds):
        try:  # rows given where a column goes: numpy's shape says so in the caller's check
            return np.asarray(values)
        except ValueError:  # ragged: one element a sequence, refused on its own
            pass
    return object_vector(values)


#: The element types a list is converted by numpy as numbers (bools apart).
_NUMBERS = (int, float, np.integer, np.floating)


def _is_real(value: Any) -> bool:
    """A real number that is not a bool (numpy scalars included), or a ``Decimal`` (what a
    database driver gives for a SQL ``NUMERIC`` column; ``numbers.Real`` leaves it out)."""
    return (isinstance(value, numbers.Real | decimal.Decimal)
            and not isinstance(value, bool | np.bool_ | DATE_SCALARS))


def _as_float(value: Any) -> float:
    """A real number as a float; an integer too large for one is infinite, and a signaling
    ``Decimal`` NaN (which ``float`` refuses with a ``ValueError``) is NaN."""
    try:
        return float(value)
    except OverflowError:
        return math.inf
    except ValueError:
        return math.nan


def _float_categories(values: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """A float column of a categorical feature as :meth:`RecordValidator.columns` reads it,
    without a Python step per row: NaN is missing (``None``), a whole number its integer
    (pandas stores integer categories with a gap as floats); what is left (a fraction,
    ±inf, a whole number past 2**53) is marked to be judged row by row. Returns a new
    object array and that mark."""
    missing = np.isnan(values)
    whole = np.isfinite(values) & (np.abs(values) <= 2.0**53)
    whole[whole] = values[whole] == np.floor(values[whole])
    out = values.astype(object)
    out[missing] = None
    out[whole] = values[whole].astype(np.int64).tolist()
    return out, ~(missing | whole)



def _kinds(categories: list[Any]) -> str:
    """What a categorical feature's public values are, for a warning: a value of another
    type never matches one (``1`` is not ``"1"``, ``True`` is not ``1``), which is the
    usual cause of a feature whose every value takes the "other" branch."""
    kinds = sorted({type(c).__name__ for c in categories})
    return (f"its categories are of type {' and '.join(kinds)}: "
            f"{categories_preview(categories)}; a value of another "
            "type, such as 1 for '1', is none of them")


class _WarningsAtEnd:
    """:meth:`RecordValidator.warnings_at_end` as a plain context manager: ``learn_one``
    opens one a record, and contextlib's generator-based one cost a few microseconds of a
    record's thirty (learn_one on California: 27,000 → 19,000 records/s with two a
    record)."""

    __slots__ = ("validator",)

    def __init__(self, validator: RecordValidator) -> None:
        self.validator = validator

    def __enter__(self) -> None:
        self.validator._deferring += 1

    def __exit__(self, kind: type[BaseException] | None, *_: object) -> None:
        validator = self.validator
        validator._deferring -= 1
        if kind is None:  # an error keeps the held warnings for the next block
            while not validator._deferring and validator._held:
                validator._give(*validator._held.pop(0))


class RecordValidator:
    """The public schema's rules for one record (see the module docstring).

    Parameters
    ----------
    schema
        Public feature bounds and domains (and ``target_bounds`` for regression).
    task
        ``"regression"`` or ``"classification"``.
    strict
        ``True``: a record must name every feature of the schema (``None`` marks a missing
        value); one that leaves a feature out is refused (reason ``schema``). It is a rule
        per record, so a refused record is an empty event and the public schedule does not
        change (a stop of the stream would tell who was in it).

    Examples
    --------
    >>> schema = PublicSchema(features={"age": (0, 100), "sex": ["F", "M"]},
    ...                       target_bounds=(0, 10))
    >>> check = RecordValidator(schema, "regression")
    >>> check.features({"age": 130, "sex": "X"})
    array([100.,   2.])
    >>> check.label("5")
    Traceback (most recent call last):
    ...
    renyiboost.exceptions.InvalidRecord: a regression label must be a number, got str '5'
    """

    def __init__(self, schema: PublicSchema, task: str, strict: bool = False) -> None:
        if task == "regression" and schema.target_bounds is None:
            raise ValueError("regression needs public target_bounds=(lo, hi)")
        if not isinstance(strict, bool | np.bool_):
            raise TypeError(f"strict must be True or False, got {strict!r}")
        self.schema = schema
        self.task = task
        self.strict = bool(strict)
        self._lo, self._hi = schema.target_bounds or (-math.inf, math.inf)
        #: label → class index, for a classifier with a public label set.
        self._label_codes = None if schema.labels is None else schema.label_index
        #: Per class, whether it is a bool (None: no label is mistaken for another kind).
        self._label_is_bool = schema.label_is_bool
        #: name → (column, category index or None, lo, hi): one dict lookup per value.
        self._encoders = {name: (j, index, lo, hi)
                          for j, (name, index, lo, hi) in enumerate(schema._encoders)}
        #: Per column: accepted values outside the public bounds or domain (operator
        #: telemetry: it describes the data).
        self.outside = np.zeros(schema.n_features, dtype=np.int64)
        self._warned: set[int] = set()
        #: Whether a record without values was warned about, once for records learned and
        #: once for records answered (a prediction's must not spend a learned one's warning).
        self._warned_empty = {"learned": False, "answered": False}
        #: Categorical columns whose answered value was of a type none of the categories has
        #: (warned about once each; learned values are warned about by :meth:`note_outside`).
        self._warned_answered_type: set[int] = set()
        self._category_kinds: dict[int, set[type]] = {}
        #: Open :meth:`warnings_at_end` blocks, and the warnings they hold back (texts, or
        #: callables asked for their text, or ``None``, when the blocks end), each with its
        #: category.
        self._deferring = 0
        self._held: list[tuple[str | Callable[[], str | None], type[Warning]]] = []
        #: Where an operator reads :attr:`outside` (named by :meth:`note_outside`'s warning).
        self.counts_at = "operator_telemetry().outside_domain"

    # ------------------------------------------------------------------ features
    def features(self, x: Any, outside: list[int] | None = None,
                 refuse_other_types: bool = False) -> np.ndarray:
        """The encoded row of ``x`` (absent features are NaN, missing); raises
        ``InvalidRecord('schema', …)``. The columns whose value lies outside its public bound
        or domain are appended to ``outside`` (for :meth:`note_outside`, once the whole record
        is accepted). ``refuse_other_types``: an answered categorical value of a type none of
        the feature's categories has is refused rather than warned about once
        (:meth:`note_answered_type`; ``renyiboost serve`` answers 422 for it).

        Checks and encodes in one pass, with exact-type fast paths for the common Python
        values (the ``learn_one`` path); anything else goes through :meth:`_check_value`.
        """
        if type(x) is not dict and not isinstance(x, Mapping):
            hint = " (a pandas Series: x.to_dict())" if hasattr(x, "to_dict") else ""
            raise InvalidRecord("schema", f"x must be a mapping from feature name to value, "
                                          f"got {type(x).__name__}{hint}")
        row = [math.nan] * self.schema.n_features
        encoders = self._encoders
        for name, value in x.items():
            encoder = encoders.get(name)
            if encoder is None:
                encoder = self._renamed(name, x)
            if value is None:
                continue
            j, index, lo, hi = encoder  # type: ignore[misc]
            kind = type(value)
            if index is not None:
                if kind is not str and kind is not int and kind is not bool:
                    value = self._unusual(name, value, categorical=True)
                    if value is None:
                        continue
                    kind = type(value)
                code = index.get(category_key(value) if kind is bool or kind is np.bool_
                                 else value)
                if code is None:
                    code = hi  # the "other" branch
                    if outside is not None:
                        outside.append(j)
                    elif refuse_other_types or j not in self._warned_answered_type:
                        self.note_answered_type(j, [value], refuse=refuse_other_types)
                row[j] = float(code)
                continue
            number = value if kind is float else _as_float(value) if kind is int else None
            if number is None or not -math.inf < number < math.inf:  # NaN fails both
                if self._unusual(name, value, categorical=False) is None:
                    continue  # NaN or NA: missing
                number = _as_float(value)
            if lo <= number <= hi:
                row[j] = number
            else:
                row[j] = lo if number < lo else hi
                if outside is not None:
                    outside.append(j)
        if self.strict and len(x) < len(encoders):
            given = set(map(str, x))
            self._absent(next(name for name in encoders if name not in given))
        use = "answered" if outside is None else "learned"
        if not self._warned_empty[use] and all(map(math.isnan, row)):  # stops at a value
            self.note_empty(use)
        return np.array(row)

    def _unusual(self, name: Any, value: Any, categorical: bool) -> Any:
        """A value of a dict that :meth:`features`' fast paths do not take, as a data
        frame's column gives it (:meth:`columns`): ``None`` for a missing mark (NaN of any
        float type, pandas' ``NA``: River's ``iter_pandas`` and scalers hand those on), the
        integer of a whole-number float in a categorical feature, else the value itself once
        :meth:`_check_value` has judged it (it raises for ±inf, strings in a numeric
        feature, fractions in a categorical one …)."""
        if is_missing(value):
            return None
        if categorical and whole_number(value):
            return int(value)
        self._check_value(str(name), value)
        return value

    def note_empty(self, use: Literal["learned", "answered"] = "learned") -> None:
        """Warn, the first time only for each ``use``, that a record held no value for any
        feature of the schema (:class:`SchemaMismatchWarning`): it is learned, or answered,
        as a record whose every feature is missing, which is what a record whose names all
        differ from the schema's would be if unknown names were dropped. A rule per record:
        the record still counts, so the public schedule does not change. Learned and
        answered records are warned about apart: a ``predict_one({})`` used up the one
        warning, and a stream of misnamed records learned after it went unwarned."""
        if self._warned_empty[use]:
            return
        self._warned_empty[use] = True
        names = ", ".join(map(repr, self.schema.names[:8]))
        self.warn_at_end(
            f"a record {use} has no value for any feature of the public schema ({names}"
            f"{', …' if self.schema.n_features > 8 else ''}); it counts as a record whose "
            "every feature is missing. Check the records' feature names (strict=True "
            "refuses such records)")

    @property
    def deferring(self) -> bool:
        """Whether a :meth:`warnings_at_end` block is open (a nested one adds nothing)."""
        return self._deferring > 0

    def warnings_at_end(self) -> _WarningsAtEnd:
        """A block that holds this validator's warnings back until it ends without an error
        (one that does keeps them for the next block). A learning call counts its records'
        positions, and runs the triggers they reach, inside the block: a filter that turns
        a warning into an error once made a record with a value out of bounds lose its
        position, and ``learn_many`` its whole batch, so the schedule depended on the
        data. They are given one at a time: one a filter makes an error leaves the rest.
        The stream engine's public calls are such blocks too, and hold its warnings about
        features that stopped or never arrived and about records without a key
        (:meth:`warn_at_end`)."""
        return _WarningsAtEnd(self)

    def warn_at_end(self, message: str | Callable[[], str | None],
                    category: type[Warning] = SchemaMismatchWarning) -> None:
        """A warning (a :class:`SchemaMismatchWarning` unless ``category`` says otherwise)
        at the end of the open blocks (now, outside any): ``message``, or what a callable
        gives then (``None``: no warning), so that a warning about the stream is judged, and
        may be made an error, once the call's positions are all counted."""
        if self._deferring:
            self._held.append((message, category))
        else:
            self._give(message, category)

    @staticmethod
    def _give(message: str | Callable[[], str | None], category: type[Warning]) -> None:
        text = message() if callable(message) else message
        if text is not None:
            warnings.warn(text, category, stacklevel=outside_stacklevel())

    def _renamed(self, name: Any, x: Mapping[Any, Any]) -> tuple[int, Any, float, float]:
        """The encoder of a name that is not a schema name as given: a name that is not a
        ``str`` (River's generators yield ``{0: …, 1: …}``) is matched as its string, as the
        schema stores it, unless the record also holds that string (two values of one
        feature). Anything else is :meth:`_unknown`."""
        if not isinstance(name, str):
            key = str(name)
            encoder = self._encoders.get(key)
            if encoder is not None:
                if key in x:
                    raise InvalidRecord("schema", f"feature {key!r} is given twice, as "
                                                  f"{name!r} and as {key!r}")
                return encoder
        self._unknown(name)

    @staticmethod
    def _absent(name: str) -> NoReturn:
        raise InvalidRecord("schema", f"feature {name!r} is absent (strict=True: a record "
                                      "names every feature of the schema; None marks a "
                                      "missing value)")

    def rows(self, records: Iterable[Any]) -> np.ndarray:
        """:meth:`features` of many records as an ``(n, n_features)`` matrix (prediction)."""
        encoded = [self.features(x) for x in records]
        return np.vstack(encoded) if encoded else np.empty((0, self.schema.n_features))

    def note_outside(self, columns: Iterable[int] | np.ndarray) -> None:
        """Count values outside the public bounds or domain (column indices, or per-column
        counts as an array) and warn once per feature (:class:`SchemaMismatchWarning`)."""
        if isinstance(columns, np.ndarray):
            self.outside += columns
            hit = np.flatnonzero(columns).tolist()
        else:
            hit = list(columns)
            np.add.at(self.outside, hit, 1)
        for j in set(hit) - self._warned:
            self._warned.add(j)
            name, spec = self.schema.names[j], list(self.schema.features.values())[j]
            where = (f"outside its public bounds {tuple(spec)} and is clipped"
                     if isinstance(spec, tuple) else
                     f"outside its public domain and takes the 'other' branch ({_kinds(spec)})")
            self.warn_at_end(f"feature {name!r}: a value lies {where}; if that is frequent, "
                             f"check the public schema (counts: {self.counts_at})")

    def note_answered_type(self, j: int, values: Iterable[Any], refuse: bool = False) -> None:
        """Warn, once for categorical column ``j``, if one of ``values`` (answered values
        that took the "other" branch) is of a type none of its categories has: a client
        sending ``"20"`` for the category ``20`` (a form, a CSV) was answered as "other"
        every time, without a word, while learning such values warned. A value of the
        categories' type that is none of them is the domain's "other" and is not warned
        about. ``refuse``: raise ``InvalidRecord('schema', …)`` instead, every time (an
        HTTP client reads its answer, not the server's log)."""
        categories = self.schema.features[self.schema.names[j]]
        kinds = self._category_kinds.get(j)
        if kinds is None:  # asked again for each answered "other" until it warns
            kinds = self._category_kinds[j] = {type(category_key(c)) for c in categories}
        odd = next((v for v in values if type(category_key(v)) not in kinds), None)
        if odd is None:
            return
        if refuse:
            raise InvalidRecord("schema", f"feature {self.schema.names[j]!r}: the value "
                                          f"{odd!r:.40} is of a type none of its categories "
                                          f"has ({_kinds(categories)})")
        self._warned_answered_type.add(j)
        self.warn_at_end(f"feature {self.schema.names[j]!r}: a value answered, {odd!r:.40}, "
                         f"takes the 'other' branch ({_kinds(categories)}); check the types "
                         "the client sends")

    def _unknown(self, name: Any) -> NoReturn:
        schema = self.schema
        known = ", ".join(map(repr, schema.names[:8])) + (", …" if schema.n_features > 8 else "")
        raise InvalidRecord("schema", f"unknown feature {name!r:.80} (not in the public schema: "
                                      f"{known}){unicode_twin(name, schema.names)}")

    def columns(
        self, columns: Mapping[str, Any], n_rows: int, exclude: Iterable[int] = (),
        count: bool = False,
    ) -> tuple[np.ndarray, dict[int, InvalidRecord]]:
        """Encoded rows of a column mapping (a DataFrame's columns) and why each bad row is
        refused. Rows are judged one by one, exactly as :meth:`features` would judge the
        row's dict without its missing values; bad rows come back as all-NaN rows. A
        DataFrame cannot leave a value out, so it marks one missing with ``None``, NaN or
        pandas' ``NA`` (``pd.DataFrame(dicts)`` puts NaN where a dict lacked a key): all
        three are missing here, in any column, as in a dict. A whole-number float in a
        categorical column is its integer (pandas stores integer categories with a gap as
        floats). Rows in ``exclude`` (refused for another reason) are not judged; with
        ``count``, the accepted rows' values outside the public bounds or domain are noted
        (:meth:`note_outside`)."""
        bad: dict[int, InvalidRecord] = {}
        skip = set(exclude)
        if not all(type(name) is str for name in columns):
            try:
                columns = named_columns(columns)
            except InvalidRecord as why:
                return (np.full((n_rows, self.schema.n_features), np.nan),
                        dict.fromkeys(range(n_rows), why))
        unknown = [name for name in columns if name not in self._encoders]
        absent = [name for name in self._encoders if name not in columns] if self.strict else []
        if unknown or absent:
            try:
                self._unknown(unknown[0]) if unknown else self._absent(absent[0])
            except InvalidRecord as why:
                if unknown:  # a frame with an id or label column: say what to do
                    why = InvalidRecord("schema", f"{why.detail}; every column given must "
                                        "be a feature: drop the others (a key column goes "
                                        "in keys=)")
                bad = dict.fromkeys(range(n_rows), why)
            return np.full((n_rows, self.schema.n_features), np.nan), bad
        arrays = {}
        for name, column in columns.items():
            values = vector(column)
            if values.shape != (n_rows,):
                raise ValueError(f"column {name!r} has shape {values.shape}, expected ({n_rows},)")
            categorical = isinstance(self.schema.features[name], list)
            copied = False
            if values.dtype.kind in "mMc":  # dates or durations, NaT too, or complex
                # numbers: no feature value (a complex column reached the encoder and failed
                # the whole batch: review T #3)
                why = InvalidRecord("schema", f"feature {name!r} got a column of "
                                    f"{values.dtype}: " + (
                                        "give real numbers" if values.dtype.kind == "c" else
                                        "give dates and durations as numbers (e.g. days) or "
                                        "categories"))
                bad.update((i, why) for i in range(n_rows) if i not in bad and i not in skip)
                arrays[name] = np.full(n_rows, None, dtype=object)
                continue
            if values.dtype.kind in ("iub" if categorical else "iuf"):
                suspects = (np.zeros(n_rows, bool) if categorical  # NaN: missing, ±inf:
                            else np.isinf(values.astype(float)))  # refused, row by row
            elif categorical and values.dtype.kind == "f":
                values, suspects = _float_categories(values)
                copied = True
            else:
                suspects = np.ones(n_rows, dtype=bool)  # strings, objects: row by row
            for i in np.flatnonzero(suspects).tolist():
                value = values[i].item() if isinstance(values[i], np.generic) else values[i]
                if categorical and type(value) is str:
                    continue  # the common case of an object column, without ABC checks
                nan = is_missing(value)  # a float or Decimal NaN, pandas' NA
                whole = (categorical and isinstance(value, float) and not nan
                         and value.is_integer())
                if nan or whole:
                    if not copied:  # never write into the caller's; a float column holds
                        copied = True  # integers and None as objects
                        values = (values.astype(object) if values.dtype.kind == "f"
                                  else values.copy())
                    value = values[i] = int(value) if whole else None
                if i not in bad and i not in skip and value is not None:
                    try:
                        self._check_value(name, value)
                    except InvalidRecord as why:
                        bad[i] = why
            arrays[name] = values
        good = np.ones(n_rows, dtype=bool)
        good[[*bad, *skip]] = False
        rows = np.full((n_rows, self.schema.n_features), np.nan)
        outside = np.zeros(self.schema.n_features, dtype=np.int64)
        rows[good] = self.schema.encode_columns(
            {name: values[good] for name, values in arrays.items()}, outside,
            n_rows=int(good.sum()))
        if count:
            self.note_outside(outside)
        else:
            names = self.schema.names
            for j in set(np.flatnonzero(outside).tolist()) - self._warned_answered_type:
                if isinstance(self.schema.features[names[j]], list):  # 100 of its "other"s
                    other = good & (rows[:, j] == self.schema.n_categories[j])
                    self.note_answered_type(j, arrays[names[j]][other][:100].tolist())
        self.note_empty_rows(rows[good], "learned" if count else "answered")
        return rows, bad

    def note_empty_rows(self, rows: np.ndarray,
                        use: Literal["learned", "answered"] = "learned") -> None:
        """:meth:`note_empty` if one of the encoded ``rows`` holds no value (checked only
        while that warning has not been given)."""
        if not self._warned_empty[use] and len(rows) and np.isnan(rows).all(axis=1).any():
            self.note_empty(use)

    def _check_value(self, name: str, value: Any) -> None:
        if isinstance(self.schema.features[name], list):
            if not names_a_category(value):
                raise InvalidRecord("schema", f"feature {name!r} is categorical: expected a "
                                              f"string, integer or bool, got "
                                              f"{type(value).__name__} {value!r:.40}")
            return
        if not _is_real(value):
            hint = (" (a bool is no number here: give 0 or 1, or make the feature categorical "
                    "with the categories [False, True])" if isinstance(value, bool | np.bool_)
                    else "")
            raise InvalidRecord("schema", f"feature {name!r} is numeric, got "
                                          f"{type(value).__name__} {value!r:.40}{hint}")
        if not math.isfinite(_as_float(value)):
            what = ("an integer beyond the float range" if isinstance(value, numbers.Integral)
                    else repr(value))
            raise InvalidRecord("schema", f"feature {name!r} is {what:.40}: numeric features "
                                          "must be finite (None or NaN marks a missing value)")

    # ------------------------------------------------------------------ labels
    def label(self, y: Any) -> float:
        """The label as a float (a class's index in the schema's public label set, if it
        has one); raises ``InvalidRecord('label', …)``, saying so where the label is
        missing (``None``, NaN, pandas' ``NA``: it was "nan is not in the public label
        set", or "got nan" for a nullable ``Int64`` label's ``NA``)."""
        try:
            return self._label(y)
        except InvalidRecord:
            if y is None or is_missing(y):
                raise InvalidRecord("label", f"the label is missing ({y!r:.20}): a record "
                                             "is learned with its label") from None
            raise

    def _label(self, y: Any) -> float:
        if self._label_codes is not None:
            try:
                code = self._label_codes[y]
            except (KeyError, TypeError):
                code = None
            is_bool = self._label_is_bool
            if code is not None and (is_bool is None or is_bool[code] is (
                    type(y) is bool or type(y) is np.bool_)):
                return float(code)
            raise InvalidRecord("label", f"label {y!r:.40} is not in the public label set "
                                         f"{self.schema.labels!r:.120}"
                                + ("" if code is None else " (a bool matches only a bool "
                                   "label, and a number only a number)")
                                + unicode_twin(y, self.schema.labels or []))
        kind = type(y)
        if kind is float or kind is int:  # the common case, without ABC checks
            value = _as_float(y)
            if self.task == "classification":
                if value == 0.0 or value == 1.0:
                    return value
            elif self._lo <= value <= self._hi:
                return value
        elif kind is bool and self.task == "classification":
            return float(y)
        if self.task == "classification":
            if isinstance(y, bool | np.bool_):
                return float(y)
            if _is_real(y) and _as_float(y) in (0.0, 1.0):
                return float(y)
            raise InvalidRecord("label", f"binary labels must be 0/1 or False/True, got {y!r:.40} "
                                         "(give the model a public label set, labels=[...], "
                                         "for labels of other values)")
        if not _is_real(y):
            raise InvalidRecord("label", f"a regression label must be a number, got "
                                         f"{type(y).__name__} {y!r:.40}")
        value = _as_float(y)
        lo, hi = self.schema.target_bounds  # type: ignore[misc]
        if not math.isfinite(value):
            raise InvalidRecord("label", f"labels must be finite numbers, got {y!r:.40}")
        if not lo <= value <= hi:
            raise InvalidRecord("label", f"label {y!r:.40} is outside the public target_bounds "
                                         f"({lo}, {hi})")
        return value

    def label_column(self, raw: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
        """Decoded labels of a batch as floats (class indices with a label set) and the mask
        of those :meth:`label` accepts (the caller judges the others alone)."""
        if self._label_codes is not None:
            codes = self.schema.label_codes(raw)
            return codes.astype(float), codes >= 0
        values = np.array(raw, dtype=float)  # a bool is 0.0 or 1.0
        return values, self.labels_ok(values)

    def labels_ok(self, values: np.ndarray) -> np.ndarray:
        """:meth:`label`'s rule on an array of float labels, as a boolean mask (the caller has
        already refused non-numbers; not for a label set, see :meth:`label_column`)."""
        if self.task == "classification":
            return (values == 0.0) | (values == 1.0)
        lo, hi = self.schema.target_bounds  # type: ignore[misc]
        return (values >= lo) & (values <= hi)  # NaN fails both, ±inf one

    @property
    def _numeric_kinds(self) -> str:
        """The dtype kinds whose labels :meth:`labels_ok` judges on their float values: a
        bool is a binary label, but never a regression label (:meth:`label` refuses it)."""
        return "biuf" if self.task == "classification" else "iuf"

    def labels(self, y: Any) -> np.ndarray:
        """:meth:`label` for a whole array at once; the first bad label is reported by
        :meth:`label` itself, so the reasons are the same."""
        raw = vector(y)
        if raw.dtype.kind in "mM" and raw.size:  # none left of a refused batch: nothing
            raise _date_labels(raw.dtype)
        if self._label_codes is not None:
            values, ok = self.label_column(raw.reshape(-1))
            if not ok.all():
                self.label(raw.reshape(-1)[~ok][0])
            return values
        if raw.dtype.kind not in self._numeric_kinds:
            for value in raw.reshape(-1).tolist():
                self.label(value)
        values = raw.astype(float).reshape(-1)
        ok = self.labels_ok(values)
        if not ok.all():
            self.label(raw.reshape(-1)[~ok][0])
        return values

    def bad_rows(self, y: Any, keys: Sequence[Any] | None
                 ) -> list[tuple[int, InvalidRecord]]:
        """``(index, why)`` of every row a batch call cannot learn, in order: a label
        :meth:`label` refuses, or a key :func:`normalise_key` refuses (the label's reason
        first). Such a row keeps its stream position as an empty one, so one record's key
        or label never moves the schedule."""
        bad = dict(self.bad_labels(y))
        if keys is not None:
            for i, why in bad_keys(keys):
                bad.setdefault(i, why)
        return sorted(bad.items())

    def bad_labels(self, y: Any) -> list[tuple[int, InvalidRecord]]:
        """``(index, why)`` of every label :meth:`label` refuses (one pass, then per bad one)."""
        raw = vector(y)
        if raw.dtype.kind in "mM":
            return [(i, _date_labels(raw.dtype)) for i in range(raw.size)]
        if self._label_codes is not None:
            suspects = np.flatnonzero(~self.label_column(raw.reshape(-1))[1]).tolist()
        elif raw.dtype.kind in self._numeric_kinds:
            values = raw.astype(float).reshape(-1)
            suspects = np.flatnonzero(~self.labels_ok(values)).tolist()
        else:
            suspects = range(raw.size)
        out = []
        flat = raw.reshape(-1)
        for i in suspects:
            try:
                value = flat[i]  # a numpy scalar as Python's, but a duration as itself
                self.label(value.item() if isinstance(value, np.generic)
                           and not isinstance(value, DATE_SCALARS) else value)
            except InvalidRecord as why:
                out.append((int(i), why))
        return out


#: A feature is taken to have stopped arriving once it has had at least this many values and
#: the values it would have had in its gap, at its own rate so far, number this many too: a
#: feature that still arrives at that rate shows such a gap by chance with probability about
#: e^-20 (a Poisson count of mean 20 at 0). The first condition keeps the rate an estimate:
#: measured from a few values it is far too high (one value in the first 50 records reads as
#: 2 %), and features present in 0.1–1 % of the records, which never stopped, were called
#: stopped in 2–6 % of simulated streams of 20,000 records without it, in none with it.
STOPPED_EXPECTED_VALUES = 20
#: ... and at least this many records have had no value for it (a feature present in every
#: record is not called stopped after 20 records a producer left it out of).
STOPPED_MIN_RECORDS = 200


class FeatureArrivals:
    """Which features of a schema have had a value so far, and which had values and then
    stopped having them: a producer renamed or dropped a field mid-stream, and the model,
    which reads it as missing from then on, would lose it without a word (DEVELOPERS
    invariant 7). Operator telemetry: it describes the data, so it is never released, and
    it never changes the schedule.

    Counts rows in the order they are merged (:meth:`observe`, vectorised over a batch). A
    restarted process knows only its pool (:meth:`from_pool`).

    >>> arrivals = FeatureArrivals(["a", "b"])
    >>> arrivals.observe(np.array([[1.0, 2.0]] * 300))
    []
    >>> arrivals.observe(np.array([[1.0, np.nan]] * 250))
    ['b']
    >>> arrivals.stopped, arrivals.not_arrived
    (['b'], [])
    """

    def __init__(self, names: Sequence[str]) -> None:
        self.names = list(names)
        k = len(self.names)
        self.records = 0
        #: Per feature: the records that had a value, and the index of the last one (-1: none).
        self.values = np.zeros(k, dtype=np.int64)
        self.last = np.full(k, -1, dtype=np.int64)
        self._warned = np.zeros(k, dtype=bool)

    @classmethod
    def from_pool(cls, names: Sequence[str], X: np.ndarray) -> FeatureArrivals:
        """The arrivals a restarted process starts from: its pool's rows ``X`` (each active
        key's latest record, in the order keys first came, not the stream's order). They
        tell which features arrived and at what rate, not when a feature was last seen, so
        every gap counts from the restart: a feature absent from the first records of every
        key was once called stopped on reopening, present in half the live events."""
        arrivals = cls(names)
        if len(X):
            arrivals.values = (~np.isnan(X)).sum(axis=0)
            arrivals.records = len(X)
            arrivals.last = np.where(arrivals.values > 0, len(X) - 1, -1)
        return arrivals

    def observe(self, X: np.ndarray) -> list[str]:
        """Count the encoded rows ``X`` (NaN: no value); returns the features that stopped
        arriving with them and were not named before (each is named once per process)."""
        n = len(X)
        if not n:
            return []
        present = ~np.isnan(X)
        counts = np.count_nonzero(present, axis=0)
        self.values += counts
        self.records += n
        if counts.min() == n:  # every feature in every row: no gap, nothing stops
            self.last[:] = self.records - 1
            return []
        last_in_batch = n - 1 - np.argmax(present[::-1], axis=0)
        self.last = np.where(counts > 0, self.records - n + last_in_batch, self.last)
        new = self._stopped() & ~self._warned
        self._warned |= new
        return [name for name, hit in zip(self.names, new, strict=True) if hit]

    def _gaps(self) -> tuple[np.ndarray, np.ndarray]:
        """Per feature: the records since its last value, and its rate until then."""
        return self.records - 1 - self.last, self.values / np.maximum(self.last + 1, 1)

    def _stopped(self) -> np.ndarray:
        gap, rate = self._gaps()
        return ((self.values >= STOPPED_EXPECTED_VALUES) & (gap >= STOPPED_MIN_RECORDS)
                & (rate * gap >= STOPPED_EXPECTED_VALUES))

    def describe(self, name: str) -> str:
        """How long ``name`` has had no value, against its rate before (for a warning)."""
        j = self.names.index(name)
        gap, rate = (column[j] for column in self._gaps())
        return (f"feature {name!r} had a value in {rate:.0%} of the first {self.last[j] + 1} "
                f"records and in none of the {gap} since; check that the producers still "
                "send it under that name (a renamed or dropped field is read as missing)")

    @property
    def not_arrived(self) -> list[str]:
        """The features no record had a value for."""
        return [name for name, n in zip(self.names, self.values, strict=True) if not n]

    @property
    def stopped(self) -> list[str]:
        """The features stopped now (one that arrives again leaves this list)."""
        return [name for name, hit in zip(self.names, self._stopped(), strict=True) if hit]
