"""Warnings and errors raised by renyiboost.

The warnings follow diffprivlib's model: a privacy-relevant shortcut is never silent. The
errors name what is wrong and what to do; the ``renyiboost`` command prints them as one line
and exits non-zero.
"""

from __future__ import annotations

import contextlib
import os
import sys
import warnings
from collections.abc import Iterator
from typing import Any

_PACKAGE = os.path.dirname(os.path.abspath(__file__)) + os.sep


def outside_stacklevel() -> int:
    """The ``stacklevel`` for ``warnings.warn`` that names the first line outside this
    package: the user's ``learn_one`` or ``fit``, not ``engine.py``, whichever path inside
    led to the warning (a fixed level named the package's own lines from some entry points,
    e.g. a ``TestingOnlyWarning`` at ``engine.py:688``), nor ``contextlib``'s when a block
    of the package's warns at its end. Call it in the ``warn`` call."""
    frame = sys._getframe(1)  # the function that warns: level 1
    level = 1
    while frame is not None and (frame.f_code.co_filename.startswith(_PACKAGE)
                                 or frame.f_code.co_filename == contextlib.__file__):
        frame = frame.f_back
        level += 1
    return level


def field_errors(error: Any, prefix: str = "") -> str:
    """A pydantic ``ValidationError`` as one line, ``field: message; …``, each field named
    from ``prefix`` (``model.`` for a config's table), without pydantic's documentation
    link, its dump of the input or its "Value error, " (a TOML's bad bounds once printed
    all three)."""
    return "; ".join(
        f"{prefix}{'.'.join(map(str, e['loc'])) or 'value'}: "
        f"{str(e['msg']).removeprefix('Value error, ')}"
        for e in error.errors(include_url=False))


@contextlib.contextmanager
def plain_argument_errors(owner: str) -> Iterator[None]:
    """Arguments a pydantic model refuses, as scikit-learn refuses a bad parameter: one
    ``ValueError`` line naming ``owner`` and each argument (:func:`field_errors`), without
    pydantic's banner, documentation link and dump of the input (for a schema, the whole
    feature table)."""
    from pydantic import ValidationError

    try:
        yield
    except ValidationError as error:
        raise ValueError(f"{owner}: {field_errors(error)}") from None


class PrivacyLeakWarning(UserWarning):
    """Something the privacy guarantee does not cover is happening.

    A public input (feature bounds, label bounds, category set) was read from the data, or
    records arrive without keys, so the unit of privacy is one record instead of one person.
    """


class NonPrivateWarning(PrivacyLeakWarning):
    """The model was built with ``epsilon=None``: no noise and no accounting, so its trees
    and answers can reveal the training records. For exploration and for comparison rows;
    its guarantee says ``private=False``."""


class TestingOnlyWarning(UserWarning):
    """The noise was drawn from a seeded pseudo-random generator.

    A seeded model is reproducible, which is what tests need, but its noise is predictable
    to anyone who knows the seed, so the privacy guarantee does not hold.
    """

    __test__ = False  # not a pytest test class despite the name


def ignore_comparison_warnings() -> None:
    """Silence, in an experiment or benchmark (its worker process, or a ``catch_warnings``
    block), the warnings of runs that are deliberately seeded or non-private: reproducible
    tables and ε = ∞ comparison rows, which would otherwise warn once per run."""
    warnings.simplefilter("ignore", TestingOnlyWarning)
    warnings.simplefilter("ignore", NonPrivateWarning)


class SchemaMismatchWarning(UserWarning):
    """The records do not look like the public schema says: values outside the public bounds
    or domain (clipped, or sent to "other"), a feature the schema names that never arrives,
    or one that arrived and then stopped (:class:`~renyiboost.validation.FeatureArrivals`).

    Raised once per feature; the counts are operator telemetry (they describe the data).
    """


class RenyiboostError(Exception):
    """Base of the errors the ``renyiboost`` command reports as one line (exit code 1)."""


class InvalidRecord(ValueError, RenyiboostError):
    """A record (features, label or key) breaks the public schema.

    ``reason`` is the machine-readable cause, the one a Kafka dead letter carries in its
    ``reason`` header: ``schema`` (features), ``label``, ``key`` or ``missing_key``.
    """

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason
        self.detail = detail

    def __reduce__(self) -> tuple[type, tuple[str, str]]:
        # Exception pickles its ``args`` (the message alone), which this ``__init__`` cannot
        # take back: a record refused in a worker process (a pool, a Ray shard) would reach
        # the caller as a broken pool instead of this error with its reason.
        return type(self), (self.reason, self.detail)


class StateStoreError(RenyiboostError):
    """A state store cannot be used as asked (missing, locked, corrupt, full, mismatched)."""


class StoreNotFound(StateStoreError):
    """No initialised state store where one was expected (it is never created implicitly)."""


class StoreLocked(StateStoreError):
    """Another process holds the state store."""


class EngineClosed(StateStoreError):
    """The model was closed: it answers, but learns no more (its store and lock are
    released, and another engine may hold them now)."""


class LedgerConflict(StateStoreError):
    """Going on would give some key a second budget or re-base its budget (refused)."""


class StoreResharded(LedgerConflict):
    """The store's ledgers were moved by ``renyiboost reshard`` (or are being moved): it must
    not train."""


class BrokerUnavailable(RenyiboostError):
    """The Kafka cluster did not answer within the configured timeout."""


class ShardUnavailable(RenyiboostError):
    """A shard of a sharded deployment died or did not answer (its process was killed, its
    node lost). The round it was in is aborted: nothing of it is released."""

    def __init__(self, shard: int, detail: str) -> None:
        super().__init__(f"shard {shard} is unavailable: {detail}")
        self.shard = shard
        self.detail = detail

    def __reduce__(self) -> tuple[type, tuple[int, str]]:
        return type(self), (self.shard, self.detail)  # pickled as built (see InvalidRecord)


class BudgetExceeded(ValueError, RenyiboostError):
    """A model would spend more of a shared privacy budget than is left
    (:class:`~renyiboost.accounting.budget.PrivacyAccountant`); nothing was charged."""
