"""The Kafka client settings: one set of fields and checks for the ``[kafka]`` table of a
config file and for :class:`KafkaSettings`, which the connectors are built from.

They live apart from :mod:`renyiboost.connectors.kafka` so that a config file is judged
whole when it is read, whatever its source (the checks of ``[kafka]`` once ran only when a
Kafka trainer started, so ``state init`` accepted a table ``train`` then refused, and the
error did not name the file: review C, 29 November), without loading the Kafka client.
"""

from __future__ import annotations

import logging
import math
import re
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from renyiboost.settings import Settings

#: librdkafka settings the trainer, the publisher and the follower set themselves
#: (refused in ``extra``).
MANAGED_CLIENT_SETTINGS = frozenset({
    "bootstrap.servers", "metadata.broker.list", "group.id", "enable.auto.commit",
    "enable.auto.offset.store", "auto.offset.reset", "isolation.level", "transactional.id",
    "enable.idempotence", "enable.partition.eof", "logger", "error_cb", "on_delivery",
    "stats_cb", "throttle_cb"})


def refuse_managed(settings: dict[str, str], where: str, why: str = "") -> dict[str, str]:
    """``settings`` unless they set one of :data:`MANAGED_CLIENT_SETTINGS` (``ValueError``
    naming ``where`` they came from): one there once replaced renyiboost's own silently."""
    managed = sorted(settings.keys() & MANAGED_CLIENT_SETTINGS)
    if managed:
        raise ValueError(f"{where} sets {managed}, which renyiboost sets itself{why}")
    return settings


def _not_blank(value: str) -> str:
    if not value.strip():
        raise ValueError("must not be empty or blank")
    return value


#: A topic, group or message key: a blank one was sent to the broker (a blank model name
#: keyed every release with "", which a follower of the default name never read).
Name = Annotated[str, AfterValidator(_not_blank)]

#: What Kafka accepts as a topic name (its ``Topic.validate``: ASCII letters, digits, ``.``,
#: ``_`` and ``-``, at most 249 characters, not ``.`` or ``..``).
_TOPIC = re.compile(r"[A-Za-z0-9._-]{1,249}")


def topic_name(value: str) -> str:
    """``value`` if Kafka accepts it as a topic name, else a ``ValueError`` saying why: a
    name the broker refuses was found only when the first message was sent (review U #5)."""
    if not _TOPIC.fullmatch(value) or value in (".", ".."):
        raise ValueError(f"a Kafka topic name is 1 to 249 ASCII letters, digits, '.', '_' or "
                         f"'-' (not '.' or '..'), got {value!r}")
    return value


TopicName = Annotated[str, AfterValidator(_not_blank), AfterValidator(topic_name)]


def dead_letter_topic(topic: str) -> str:
    """Where the events of ``topic`` that cannot be learned go (the operator's topic)."""
    return f"{topic}.dlq"


class KafkaClientTable(Settings):
    """The settings of the ``[kafka]`` table of a config file (all optional)."""

    model_config = ConfigDict(extra="forbid")

    group_id: Name = "renyiboost"
    batch_size: int = Field(1000, ge=1, le=1_000_000, description="messages per poll "
                            "(bounded memory; librdkafka takes at most 10⁶)")
    connect_timeout: float = Field(
        30.0, gt=0, description="seconds the cluster may stay unreachable (at start or while "
        "running) before the trainer stops with an error")
    dlq_timeout: float = Field(
        30.0, gt=0, description="seconds a batch's dead letters may take to be delivered "
        "before the trainer stops with nothing of the batch committed")
    partitioner: Literal["consistent_random", "murmur2_random"] = Field(
        "consistent_random", description="the producers' partitioner (librdkafka's names): "
        "with several shards an event must be in the partition it gives its message key, "
        "else dead-lettered (reason 'partition'). consistent_random (CRC-32) is librdkafka's "
        "default, so confluent-kafka's; murmur2_random is the Java client's")
    extra: dict[str, str] = Field(default_factory=dict)

    @field_validator("connect_timeout", "dlq_timeout")
    @classmethod
    def _finite(cls, value: float, info: ValidationInfo) -> float:
        if not math.isfinite(value):
            raise ValueError(f"{info.field_name} must be a finite number of seconds")
        return value

    @field_validator("extra")
    @classmethod
    def _not_managed(cls, value: dict[str, str]) -> dict[str, str]:
        """librdkafka settings renyiboost sets itself are refused in ``extra``: one there
        once replaced them silently (``bootstrap.servers`` connected elsewhere than
        ``--source`` named, and the error then named the wrong broker)."""
        return refuse_managed(value, "extra", " (the broker from bootstrap_servers or "
                              "--source, the group from group_id, offsets committed with the "
                              "state, fenced transactions); remove them from [kafka] extra")


class KafkaSettings(KafkaClientTable):
    """Connection and topics. ``extra`` is passed through to librdkafka (security etc.)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    bootstrap_servers: Name
    topics: list[TopicName]
    model_topic: TopicName = "renyiboost.models"
    model_name: Name = "model"
    poll_timeout: float = Field(0.5, gt=0)

    @field_validator("poll_timeout")
    @classmethod
    def _finite_poll(cls, value: float, info: ValidationInfo) -> float:
        return cls._finite(value, info)

    @model_validator(mode="after")
    def _topics_apart(self) -> KafkaSettings:
        """The event topics, their dead-letter topics and the model topic are distinct, and
        every dead-letter name is one Kafka takes: a model topic on an event or dead-letter
        topic fed releases or raw events back in as positions, and a follower of it showed
        their message keys (person ids) on the public ``/health`` (review K2 #5); a
        dead-letter name past 249 characters failed at the first bad event (K2 #2)."""
        letters = [dead_letter_topic(topic) for topic in self.topics]
        for topic, letter in zip(self.topics, letters, strict=True):
            if len(letter) > 249:
                raise ValueError(f"the dead-letter topic of {topic[:40]!r}… would have "
                                 f"{len(letter)} characters, more than Kafka takes (249): an "
                                 "event topic takes at most 245")
            if letter in self.topics:
                raise ValueError(f"topics holds {topic!r} and its dead-letter topic {letter!r}")
        if len(set(self.topics)) != len(self.topics):
            raise ValueError(f"topics names a topic twice: {self.topics}")
        if self.model_topic in (*self.topics, *letters):
            raise ValueError(f"the model topic {self.model_topic!r} is an event topic or a "
                             "dead-letter topic: releases are public, events are not")
        return self

    def client(self, **more: Any) -> dict[str, Any]:
        return {"bootstrap.servers": self.bootstrap_servers,
                "logger": logging.getLogger("renyiboost.kafka"), **self.extra, **more}
