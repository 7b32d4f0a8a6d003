"""Event validation at the edge: raw bytes → (key, encoded row, label), or a reason to reject.

The event model is a pydantic model built from the public schema: a JSON object with a key,
the features and the label under configurable field names (``{"key": ..., "x": {...},
"y": ...}`` by default). Unknown fields, wrong types, NaN and infinities are rejected with
pydantic's message; numeric values outside their public bounds are clipped and category
values outside the public domain take the "other" branch, exactly as in ``learn_one``.
A rejected event carries a short machine-readable reason for the dead-letter topic:

``oversize`` (larger than ``max_bytes``), ``json`` (not JSON), ``schema`` (types, unknown
or missing fields, NaN), ``missing_key`` (no key in the payload nor in the message) and
``label`` (outside the public target domain).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Annotated, Any

import numpy as np
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    StrictInt,
    StrictStr,
    ValidationError,
    create_model,
)

from renyiboost.schema import PublicSchema

Number = Annotated[StrictFloat | StrictInt, Field(allow_inf_nan=False)]
Category = StrictStr | StrictInt | StrictBool
REASONS = ("oversize", "json", "schema", "missing_key", "label")


class EventFormat(BaseModel):
    """Where an event keeps its parts, and how large it may be."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    key_field: str = "key"
    features_field: str = "x"
    label_field: str = "y"
    max_bytes: int = Field(65_536, gt=0)


@dataclass(frozen=True)
class Parsed:
    """A valid event."""

    key: str
    row: np.ndarray
    label: float


@dataclass(frozen=True)
class Rejected:
    """An event for the dead-letter topic, with why."""

    reason: str
    detail: str


class EventParser:
    """Validates JSON events against a model built from the public schema.

    Examples
    --------
    >>> schema = PublicSchema(features={"age": (0, 100), "sex": ["F", "M"]})
    >>> parser = EventParser(schema, label_check=float)
    >>> parser.parse(b'{"key": "u1", "x": {"age": 130, "sex": "M"}, "y": 1}').row.tolist()
    [100.0, 1.0]
    >>> parser.parse(b'{"key": "u1", "x": {"age": "old"}, "y": 1}').reason
    'schema'
    """

    def __init__(
        self,
        schema: PublicSchema,
        label_check: Callable[[Any], float],
        event_format: EventFormat | None = None,
    ) -> None:
        self.schema = schema
        self.format = event_format or EventFormat()
        self.label_check = label_check
        fields: dict[str, Any] = {
            name: ((Category if isinstance(spec, list) else Number) | None, None)
            for name, spec in schema.features.items()
        }
        features = create_model("EventFeatures", __config__=ConfigDict(extra="forbid"), **fields)
        fmt = self.format
        self.model: type[BaseModel] = create_model(
            "Event",
            __config__=ConfigDict(extra="forbid"),
            **{
                fmt.key_field: (StrictStr | StrictInt | None, None),
                fmt.features_field: (features, ...),
                fmt.label_field: (StrictFloat | StrictInt | StrictBool, ...),
            },
        )

    def parse(self, value: bytes | None, message_key: bytes | None = None) -> Parsed | Rejected:
        """Validate one message value; the payload's key wins over the message key."""
        fmt = self.format
        if value is None:
            return Rejected("json", "empty message value")
        if len(value) > fmt.max_bytes:
            return Rejected("oversize", f"{len(value)} bytes > max_bytes={fmt.max_bytes}")
        try:
            event = self.model.model_validate_json(value)
        except ValidationError as error:
            first = error.errors()[0]
            reason = "json" if first["type"] == "json_invalid" else "schema"
            where = ".".join(str(part) for part in first["loc"])
            return Rejected(reason, f"{where}: {first['msg']}"[:500])
        key = getattr(event, fmt.key_field)
        if key is None:
            if not message_key:
                return Rejected("missing_key", "no key in the payload nor in the message")
            key = message_key.decode("utf-8", "backslashreplace")
        try:
            label = self.label_check(getattr(event, fmt.label_field))
        except ValueError as error:
            return Rejected("label", str(error)[:500])
        features = getattr(event, fmt.features_field).model_dump(exclude_none=True)
        return Parsed(str(key), self.schema.encode_dict(features), label)
