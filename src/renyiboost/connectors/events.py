"""Event validation at the edge: raw bytes → (key, encoded row, label), or a reason to reject.

An event is a JSON object holding the features and the label under configurable field names
(``{"x": {...}, "y": ...}`` by default). Its **key** — the unit of privacy — is the Kafka
message key, unless :attr:`EventFormat.key_field` names a payload field, which is then the
only identity (the message key is ignored). One identity per deployment: a key that could
come from either place could live on several partitions at once.

The rules are those of :class:`renyiboost.validation.RecordValidator` — the same validator
``learn_one`` uses — plus the event's own shape: unknown fields and a missing ``x`` or ``y``
are rejected. A rejected event carries a short machine-readable reason for the dead-letter
topic:

``oversize`` (larger than ``max_bytes``), ``json`` (not JSON), ``schema`` (shape, types,
unknown features, NaN or infinite values), ``missing_key`` (no key where the format says the
key is), ``key`` (an empty, over-long or non-UTF-8 key) and ``label`` (not a label of the
public target domain).

:meth:`EventParser.parse` validates one message (the reference); :meth:`EventParser.parse_batch`
validates a poll batch in one pydantic call and returns the valid events as columns (keys,
encoded rows, labels), with exactly the rejections and reasons of
:meth:`~EventParser.parse` per message (checked by property tests).
"""

from __future__ import annotations

import gc
import json
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass
from operator import itemgetter
from typing import Annotated, Any, NotRequired

import numpy as np
import pydantic_core
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
)
from typing_extensions import TypedDict

from renyiboost.exceptions import InvalidRecord
from renyiboost.validation import MAX_KEY_CHARS, RecordValidator, normalise_key

#: A finite JSON number, as a float: a JSON integer is accepted, and one too large for a float
#: is rejected here. ``AllowInfNan`` keeps the check in pydantic-core.
Number = Annotated[float, Strict(), AllowInfNan(False)]
Category = StrictStr | StrictInt | StrictBool


class EventFormat(BaseModel):
    """Where an event keeps its parts, and how large it may be."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_field: str | None = Field(
        None, description="None: the Kafka message key is the identity (the default); a name: "
        "that payload field is, and the message key is ignored")
    features_field: str = "x"
    label_field: str = "y"
    max_bytes: int = Field(65_536, gt=0)


@dataclass(slots=True)
class Parsed:
    """A valid event: its normalised key, encoded row and label, and the columns whose value
    lay outside the public bounds or domain."""

    key: str
    row: np.ndarray
    label: float
    outside: list[int]


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
    """Validates JSON events with the public schema's :class:`RecordValidator`.

    The batch path validates with a pydantic ``TypedDict`` built from the same schema,
    straight from the JSON bytes (a few µs an event), and encodes the batch column by column;
    anything it refuses is re-judged by :meth:`parse`, so reasons and details are the
    reference path's.

    Parameters
    ----------
    validator
        The record rules (e.g. ``engine.validator``).
    event_format
        Field names, the key's source and the size limit.

    Examples
    --------
    >>> from renyiboost.schema import PublicSchema
    >>> schema = PublicSchema(features={"age": (0, 100), "sex": ["F", "M"]})
    >>> parser = EventParser(RecordValidator(schema, "classification"))
    >>> parser.parse(b'{"x": {"age": 130, "sex": "M"}, "y": 1}', b"u1").row
    array([100.,   1.])
    >>> parser.parse(b'{"x": {"age": "old"}, "y": 1}', b"u1").reason
    'schema'
    >>> batch = parser.parse_batch([b'{"x": {"age": 130}, "y": true}', b'{'], [b"u1", b"u2"])
    >>> batch.keys, batch.rows, batch.rejected[0][1].reason
    (['u1'], array([[100.,  nan]]), 'json')
    """

    def __init__(self, validator: RecordValidator, event_format: EventFormat | None = None) -> None:
        self.validator = validator
        self.schema = validator.schema
        self.format = event_format or EventFormat()
        features = _typed_dict("EventFeatures", {
            name: (Category if isinstance(spec, list) else Number) | None
            if validator.strict else
            NotRequired[(Category if isinstance(spec, list) else Number) | None]
            for name, spec in self.schema.features.items()
        })
        fmt = self.format
        label: Any = (Annotated[float, Strict()] | StrictBool
                      if validator.task == "classification" else Annotated[float, Strict()])
        fields: dict[str, Any] = {fmt.features_field: features, fmt.label_field: label}
        if fmt.key_field is not None:
            fields[fmt.key_field] = NotRequired[StrictStr | StrictInt | None]
        event = _typed_dict("Event", fields)
        # Each value is parsed as its own JSON document (never concatenated: one message must
        # not be able to reach into the next). A value that fails comes back unchanged
        # (the ``Any`` branch) instead of failing the batch, and is re-parsed on its own.
        self._batch_adapter = TypeAdapter(
            list[Annotated[Json[event] | Any, Field(union_mode="left_to_right")]],  # type: ignore[valid-type]
            config=_CONFIG,
        )
        self._fields = set(fields)

    # ------------------------------------------------------------------ one message
    def parse(self, value: bytes | None, message_key: bytes | None = None) -> Parsed | Rejected:
        """Validate one message: its size, JSON, shape, features, key and label, in order."""
        fmt = self.format
        if value is None:
            return Rejected("json", "empty message value")
        if len(value) > fmt.max_bytes:
            return Rejected("oversize", f"{len(value)} bytes > max_bytes={fmt.max_bytes}")
        try:
            event = pydantic_core.from_json(value, allow_inf_nan=True)
        except ValueError as error:
            return Rejected("json", f"not JSON: {error}"[:500])
        try:
            return self._judge(event, message_key)
        except InvalidRecord as why:
            return Rejected(why.reason, why.detail[:500])

    def _judge(self, event: Any, message_key: bytes | None) -> Parsed:
        fmt = self.format
        if not isinstance(event, dict):
            raise InvalidRecord("schema", f"an event is a JSON object, got {type(event).__name__}")
        unknown = sorted(set(event) - self._fields)
        if unknown:
            hint = (" (the key is the Kafka message key; set key_field to read it from the "
                    "payload)" if unknown[0] == "key" and fmt.key_field is None else "")
            raise InvalidRecord("schema", f"unknown field {unknown[0]!r}{hint}")
        for name in (fmt.features_field, fmt.label_field):
            if name not in event:
                raise InvalidRecord("schema", f"field {name!r} is missing")
        outside: list[int] = []
        row = self.validator.features(event[fmt.features_field], outside)
        key = self._key(event.get(fmt.key_field) if fmt.key_field else None, message_key)
        return Parsed(key, row, self.validator.label(event[fmt.label_field]), outside)

    def _key(self, payload_key: Any, message_key: bytes | None) -> str:
        """The event's identity (see the module docstring); raises ``InvalidRecord``."""
        if self.format.key_field is not None:
            if payload_key is None:
                raise InvalidRecord("missing_key", f"no {self.format.key_field!r} field in the "
                                                   "payload (the configured identity)")
            if isinstance(payload_key, bool) or not isinstance(payload_key, str | int):
                raise InvalidRecord("schema", f"the key must be a string or an integer, got "
                                              f"{type(payload_key).__name__}")
            return normalise_key(payload_key)
        if not message_key:
            raise InvalidRecord("missing_key", "the message has no key (the identity)")
        return normalise_key(message_key)

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
        self.validator.note_outside([j for _, p in valid for j in p.outside])
        rows = (np.vstack([p.row for _, p in valid]) if valid
                else np.empty((0, self.schema.n_features)))
        return ParsedBatch(
            index=[i for i, _ in valid], keys=[p.key for _, p in valid], rows=rows,
            labels=[p.label for _, p in valid],
            rejected=[(i, p) for i, p in enumerate(results) if isinstance(p, Rejected)],
        )

    def _batch_keys(self, events: list[dict], message_keys: list[bytes | None],
                    index: list[int]) -> list[str | None]:
        """Every event's normalised key, or ``None`` where :meth:`_key` would refuse it."""
        field = self.format.key_field
        raw = ([event.get(field) for event in events] if field is not None
               else [message_keys[i] for i in index])
        if all(type(key) is (str if field else bytes) and 0 < len(key) <= MAX_KEY_CHARS
               and key.isascii() for key in raw):  # the common case: already normal
            return raw if field else [key.decode() for key in raw]  # type: ignore[union-attr]
        keys: list[str | None] = []
        for key in raw:
            try:
                keys.append(self._key(key, None) if field else self._key(None, key))
            except InvalidRecord:
                keys.append(None)
        return keys

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

        keys = self._batch_keys(events, message_keys, index)
        if None in keys:
            ok = [key is not None for key in keys]
            events = [event for event, good in zip(events, ok, strict=True) if good]
            keys = [key for key in keys if key is not None]
            index = self._reject(values, message_keys, index, rejected, ok)

        labels = np.array(list(map(itemgetter(fmt.label_field), events)), dtype=float)
        ok = self.validator.labels_ok(labels)
        if not ok.all():  # some label is outside the public domain
            events, keys = ([a for a, good in zip(column, ok, strict=True) if good]
                            for column in (events, keys))
            labels = labels[ok]
            index = self._reject(values, message_keys, index, rejected, ok.tolist())

        outside = np.zeros(self.schema.n_features, dtype=np.int64)
        rows = self.schema.encode_validated(list(map(itemgetter(fmt.features_field), events)),
                                            outside)
        self.validator.note_outside(outside)
        return ParsedBatch(index=index, keys=keys, rows=rows, labels=labels.tolist(),  # type: ignore[arg-type]
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


def event_json(key: str | None, x: Mapping[str, Any], y: float | bool,
               event_format: EventFormat | None = None) -> bytes:
    """Serialise one event in the default (or given) format; the key goes into the payload
    only when the format reads it from there (else it is the message key)."""
    fmt = event_format or EventFormat()
    event: dict[str, Any] = {fmt.features_field: dict(x), fmt.label_field: y}
    if fmt.key_field is not None:
        event[fmt.key_field] = key
    return json.dumps(event).encode()
