"""The base of the configuration models: pydantic's lax mode without its bool and text numbers.

pydantic's lax mode converts ``True`` to 1 and ``"7"`` to 7 for a number field, and
``"yes"`` or 1 to ``True`` for a bool field (its conversion table). A config file's
``seed = true`` (meant as "a secure seed, please") marked a production store as seeded for
good, ``expected_records = true`` calibrated a stream for one record, and
``warmup=True`` or ``depth=True`` were taken as 1 (reviews U #4, Y #6). Strict mode would
refuse these, but also numpy integers for an ``int`` and TOML's lists for a tuple of
bounds, which users pass every day. So :class:`Settings` refuses only the conversions no
one means: a bool or a string where a field takes numbers only (or a tuple or list of
numbers only, such as bounds), and anything but a bool where it takes a bool only.
"""

from __future__ import annotations

import types
import typing
from typing import Annotated, Any, Literal, Union, get_args, get_origin

import numpy as np
from pydantic import (
    BaseModel,
    BeforeValidator,
    PlainValidator,
    ValidationInfo,
    WrapValidator,
    field_validator,
)

#: The leaf types of a numbers-only field.
_NUMBERS = frozenset({int, float})


def _kinds(annotation: Any) -> frozenset[type]:
    """The types a field's annotation admits at its top level (a union's members, an
    ``Annotated`` type's base, a ``Literal``'s values' types; ``None`` left out; a generic
    as its container; anything else as ``object``, which admits every value)."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _kinds(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        return frozenset().union(*(_kinds(member) for member in get_args(annotation)))
    if origin is Literal:
        return frozenset(type(value) for value in get_args(annotation))
    if annotation is type(None):
        return frozenset()
    if origin is not None:
        return frozenset({origin}) if isinstance(origin, type) else frozenset({object})
    if isinstance(annotation, type) and annotation is not typing.Any:
        return frozenset({annotation})
    return frozenset({object})


def _item_kinds(annotation: Any) -> frozenset[type] | None:
    """The types the items of a tuple or list field admit (through ``Optional`` and
    ``Annotated``), or ``None`` for a field that is neither."""
    origin = get_origin(annotation)
    if origin is Annotated:
        return _item_kinds(get_args(annotation)[0])
    if origin is Union or origin is types.UnionType:
        found = [kinds for member in get_args(annotation)
                 if (kinds := _item_kinds(member)) is not None]
        return frozenset().union(*found) if found else None
    if origin is tuple or origin is list:
        return frozenset().union(*(_kinds(arg) for arg in get_args(annotation)
                                   if arg is not Ellipsis))
    return None


def conversion_refused(annotation: Any, value: Any) -> str | None:
    """Why ``value`` may not be converted for a field of ``annotation``, or ``None``: at the
    top level, and in a tuple or list of numbers (``target_bounds = [true, 10]`` was
    ``(1.0, 10.0)``: review D7 #6)."""
    if isinstance(value, list | tuple) and (items := _item_kinds(annotation)):
        odd = next((v for v in value if isinstance(v, bool | np.bool_ | str | bytes)), None)
        if items <= _NUMBERS and odd is not None:
            return f"must hold numbers, got {type(odd).__name__} {odd!r:.40}"
    kinds = _kinds(annotation)
    if not kinds:
        return None
    if kinds <= _NUMBERS and isinstance(value, bool | np.bool_ | str | bytes):
        return f"must be a number, got {type(value).__name__} {value!r:.40}"
    if kinds == {bool} and not isinstance(value, bool | np.bool_):
        return f"must be true or false, got {type(value).__name__} {value!r:.40}"
    return None


class Settings(BaseModel):
    """A configuration model: lax pydantic, except that a bool or a string is never taken
    for a number, nor a number or a string for a bool (module docstring). A field with a
    conversion check of its own (ε and δ: :mod:`renyiboost.accounting.inputs`) keeps it."""

    @field_validator("*", mode="before")
    @classmethod
    def _no_bool_or_text_numbers(cls, value: Any, info: ValidationInfo) -> Any:
        if value is None or info.field_name is None:
            return value
        field = cls.model_fields.get(info.field_name)
        if field is None or any(isinstance(rule, _OWN_CHECKS) for rule in field.metadata):
            return value
        why = conversion_refused(field.annotation, value)
        if why is not None:
            raise ValueError(why)
        return value


#: Validators that see a field's raw value first and judge its type themselves.
_OWN_CHECKS = (BeforeValidator, PlainValidator, WrapValidator)


__all__ = ["Settings", "conversion_refused"]
