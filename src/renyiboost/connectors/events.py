"""Event validation at the edge: raw bytes → (key, encoded row, label), or a reason to reject.

The event model is a pydantic model built from the public schema: a JSON object with a key,
the features and the label under configurable field names (``{"key": ..., "x": {...},
"y": ...}`` by default). Unknown fields, wrong types, NaN and infinities (and integers too
large for a float) are rejected with pydantic's message; numeric values outside their public
bounds are clipped and category values outside the public domain take the "other" branch,
exactly as in ``learn_one``. A rejected event carries a short machine-readable reason for the
dead-letter topic:

``oversize`` (larger than ``max_bytes``), ``json`` (not JSON), ``schema`` (types, unknown
or missing fields, NaN), ``missing_key`` (no key in the payload nor in the message) and
``label`` (outside the public target domain).

:meth:`EventParser.parse` validates one message; :meth:`EventParser.parse_batch` validates a
poll batch in one pydantic call and returns the valid events as columns (keys, encoded rows,
labels), with exactly the rejections and reasons of :meth:`~EventParser.parse` per message.
"""

from __future__ import annotations

import gc
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from itertools import repeat
from operator import itemgetter
from typing import Annotated, Any, NotRequired

import numpy as np
from pydantic import (
    AllowInfNan,
    BaseModel,
    ConfigDict,
    Field,
    Json,
    Strict,
    StrictBool,
    StrictInt,
    StrictStr,
    TypeAdapter,
    ValidationError,
)
from typing_extensions import TypedDict

from renyiboost.schema import PublicSchema

#: A finite JSON number, as a float: a JSON integer is accepted, and one too large for a float
#: is rejected here (as an int it used to pass and then crash the encoder, stopping the
#: stream). ``AllowInfNan`` keeps the check in pydantic-core.
Number = Annotated[float, Strict(), AllowInfNan(False)]
Category = StrictStr | StrictInt | StrictBool
#: NaN, infinities and huge integers (→ inf) pass here and are refused by the label check,
#: with reason ``label`` (a huge int used to raise ``OverflowError`` there, stopping the stream).
Label = Annotated[float, Strict()] | StrictBool


class EventFormat(BaseModel):
    """Where an event keeps its parts, and how large it may be."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_field: str = "key"
    features_field: str = "x"
    label_field: str = "y"
    max_bytes: int = Field(65_536, gt=0)


@dataclass(slots=True)
class Parsed:
    """A valid event (features as a validated dict, not yet encoded)."""

    key: str
    features: dict[str, Any]
    label: float


@dataclass(frozen=True)
class Rejected:
    """An event for the dead-letter topic, with why."""

    reason: str
    detail: str


@dataclass(slots=True)
class ParsedBatch:
    """A validated batch: the valid events as columns, in message order, and the rejected.

    ``index[i]`` is the position in the batch of the message behind ``keys[i]``,
    ``rows[i]`` and ``labels[i]``; ``rejected`` lists ``(position, why)`` in order.
    """

    index: list[int]
    keys: list[str]
    rows: np.ndarray
    labels: list[float]
    rejected: list[tuple[int, Rejected]]


@contextmanager
def cycle_collector_paused() -> Iterator[None]:
    """Pause Python's cycle collector for the block (unless the caller already did).

    Validating a batch allocates two dicts per event, all alive until the batch is
    encoded, so the collector promotes them to the old generation and runs a full
    collection every few batches (~0.5 s of the ~3.5 s the trainer took for 200,000
    events). Reference counting frees them (they form no cycles); the collector runs
    again as soon as the block ends.
    """
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


class _Disagreement(Exception):
    """A message failed a batch check but passes :meth:`EventParser.parse` alone."""


#: Only field names are worth caching: values (keys, numbers) rarely repeat (a few % faster).
_CONFIG = ConfigDict(cache_strings="keys")


def _typed_dict(name: str, fields: dict[str, Any]) -> type:
    """A TypedDict that pydantic validates strictly (unknown keys are errors)."""
    typed = TypedDict(name, fields)  # type: ignore[operator]
    typed.__pydantic_config__ = ConfigDict(extra="forbid", **_CONFIG)  # type: ignore[attr-defined]
    return typed


class EventParser:
    """Validates JSON events against a model built from the public schema.

    The model is a pydantic ``TypedDict`` validated straight from the JSON bytes into dicts
    (a few µs an event); :meth:`parse_batch` then encodes the batch column by column.

    Parameters
    ----------
    schema
        The public schema (features and their domains).
    label_check
        Validates one label and returns it as a float, raising ``ValueError`` with the
        reason otherwise (e.g. :meth:`StreamEngine.check_label`).
    labels_ok
        The same rule on an array of float labels, as a boolean mask (e.g.
        :meth:`StreamEngine.label_ok`), for :meth:`parse_batch`; without it the batch path
        calls ``label_check`` per label.
    event_format
        Field names and the size limit.

    Examples
    --------
    >>> schema = PublicSchema(features={"age": (0, 100), "sex": ["F", "M"]})
    >>> parser = EventParser(schema, label_check=float)
    >>> parser.parse(b'{"key": "u1", "x": {"age": 130, "sex": "M"}, "y": 1}').features
    {'age': 130.0, 'sex': 'M'}
    >>> parser.parse(b'{"key": "u1", "x": {"age": "old"}, "y": 1}').reason
    'schema'
    >>> batch = parser.parse_batch([b'{"key": "u1", "x": {"age": 130}, "y": 1}', b'{'],
    ...                            [None, None])
    >>> batch.keys, batch.rows, batch.rejected[0][1].reason
    (['u1'], array([[100.,  nan]]), 'json')
    """

    def __init__(
        self,
        schema: PublicSchema,
        label_check: Callable[[Any], float],
        event_format: EventFormat | None = None,
        labels_ok: Callable[[np.ndarray], np.ndarray] | None = None,
    ) -> None:
        self.schema = schema
        self.format = event_format or EventFormat()
        self.label_check = label_check
        self.labels_ok = labels_ok or self._each_label_ok
        features = _typed_dict("EventFeatures", {
            name: NotRequired[(Category if isinstance(spec, list) else Number) | None]
            for name, spec in schema.features.items()
        })
        fmt = self.format
        event = _typed_dict("Event", {
            fmt.key_field: NotRequired[StrictStr | StrictInt | None],
            fmt.features_field: features,
            fmt.label_field: Label,
        })
        self.adapter = TypeAdapter(event)
        # Each value is parsed as its own JSON document (never concatenated: one message must
        # not be able to reach into the next). A value that fails comes back unchanged
        # (the ``Any`` branch) instead of failing the batch, and is re-parsed on its own.
        self._batch_adapter = TypeAdapter(
            list[Annotated[Json[event] | Any, Field(union_mode="left_to_right")]],  # type: ignore[valid-type]
            config=_CONFIG,
        )

    # ------------------------------------------------------------------ one message
    def parse(self, value: bytes | None, message_key: bytes | None = None) -> Parsed | Rejected:
        """Validate one message value; the payload's key wins over the message key."""
        fmt = self.format
        if value is None:
            return Rejected("json", "empty message value")
        if len(value) > fmt.max_bytes:
            return Rejected("oversize", f"{len(value)} bytes > max_bytes={fmt.max_bytes}")
        try:
            event = self.adapter.validate_json(value)
        except ValidationError as error:
            first = error.errors()[0]
            reason = "json" if first["type"] == "json_invalid" else "schema"
            where = ".".join(str(part) for part in first["loc"])
            return Rejected(reason, f"{where}: {first['msg']}"[:500])
        return self._finish(event, message_key)

    def _finish(self, event: dict[str, Any], message_key: bytes | None) -> Parsed | Rejected:
        """Checks pydantic does not make: a key, and the label's public domain."""
        fmt = self.format
        features = event[fmt.features_field]
        key = self._key(event.get(fmt.key_field), message_key)
        if key is None:
            return Rejected("missing_key", "no key in the payload nor in the message")
        try:
            label = self.label_check(event[fmt.label_field])
        except ValueError as error:
            return Rejected("label", str(error)[:500])
        return Parsed(key, features, label)

    @staticmethod
    def _key(key: Any, message_key: bytes | None) -> str | None:
        """The payload's key as a string, else the message key, else ``None``."""
        if key is None:
            return message_key.decode("utf-8", "backslashreplace") if message_key else None
        return str(key)

    # ------------------------------------------------------------------ a poll batch
    def parse_batch(
        self, values: list[bytes | None], message_keys: list[bytes | None]
    ) -> ParsedBatch:
        """:meth:`parse` for a batch of messages, as columns.

        One pydantic call validates every value (each as its own JSON document); the keys
        and labels are checked on columns and the features encoded column by column. A
        message that fails any check is re-parsed alone by :meth:`parse`, so its reason and
        detail are exactly those of the per-message path, and the others are kept.
        """
        if len(values) != len(message_keys):
            raise ValueError(f"got {len(message_keys)} message keys for {len(values)} values")
        try:
            with cycle_collector_paused():
                return self._parse_columns(values, message_keys)
        except _Disagreement:  # never seen; the per-message path is the reference
            return self.parse_each(values, message_keys)

    def parse_each(
        self, values: list[bytes | None], message_keys: list[bytes | None]
    ) -> ParsedBatch:
        """:meth:`parse_batch` by :meth:`parse` per message (the reference, and the slow
        path)."""
        results = [self.parse(v, k) for v, k in zip(values, message_keys, strict=True)]
        valid = [(i, p) for i, p in enumerate(results) if isinstance(p, Parsed)]
        return ParsedBatch(
            index=[i for i, _ in valid], keys=[p.key for _, p in valid],
            rows=self.schema.encode_validated([p.features for _, p in valid]),
            labels=[p.label for _, p in valid],
            rejected=[(i, p) for i, p in enumerate(results) if isinstance(p, Rejected)],
        )

    def _parse_columns(
        self, values: list[bytes | None], message_keys: list[bytes | None]
    ) -> ParsedBatch:
        fmt = self.format
        rejected: dict[int, Rejected] = {}
        index = list(range(len(values)))
        if None in values or max(map(len, values), default=0) > fmt.max_bytes:  # type: ignore[arg-type]
            index = self._reject(values, message_keys, index, rejected, [
                v is not None and len(v) <= fmt.max_bytes for v in values])
        events = self._batch_adapter.validate_python(
            values if len(index) == len(values) else [values[i] for i in index])
        if set(map(type, events)) - {dict}:  # values that failed validation came back as bytes
            ok = [type(event) is dict for event in events]
            events = [event for event, good in zip(events, ok, strict=True) if good]
            index = self._reject(values, message_keys, index, rejected, ok)

        keys = list(map(dict.get, events, repeat(fmt.key_field)))
        if set(map(type, keys)) - {str}:  # integer keys, or the message key, or none
            keys = [self._key(key, message_keys[i]) for key, i in zip(keys, index, strict=True)]
            if None in keys:
                ok = [key is not None for key in keys]
                events = [event for event, good in zip(events, ok, strict=True) if good]
                keys = [key for key in keys if key is not None]
                index = self._reject(values, message_keys, index, rejected, ok)

        labels = np.array(list(map(itemgetter(fmt.label_field), events)), dtype=float)
        ok = self.labels_ok(labels)
        if not ok.all():  # some label is outside the public domain
            events, keys = ([a for a, good in zip(column, ok, strict=True) if good]
                            for column in (events, keys))
            labels = labels[ok]
            index = self._reject(values, message_keys, index, rejected, ok.tolist())

        rows = self.schema.encode_validated(list(map(itemgetter(fmt.features_field), events)))
        return ParsedBatch(index=index, keys=keys, rows=rows, labels=labels.tolist(),
                           rejected=sorted(rejected.items()))

    def _reject(
        self, values: list[bytes | None], message_keys: list[bytes | None], index: list[int],
        rejected: dict[int, Rejected], ok: list[bool],
    ) -> list[int]:
        """Record why ``index[j]`` failed where ``ok[j]`` is false (by :meth:`parse` alone);
        returns the positions kept."""
        for i, good in zip(index, ok, strict=True):
            if not good:
                why = self.parse(values[i], message_keys[i])
                if not isinstance(why, Rejected):  # the batch checks and parse() disagree
                    raise _Disagreement
                rejected[i] = why
        return [i for i, good in zip(index, ok, strict=True) if good]

    def _each_label_ok(self, labels: np.ndarray) -> np.ndarray:
        """``labels_ok`` from ``label_check`` alone, one label at a time."""
        def passes(y: float) -> bool:
            try:
                self.label_check(y)
            except ValueError:
                return False
            return True
        return np.fromiter(map(passes, labels.tolist()), dtype=bool, count=labels.size)
