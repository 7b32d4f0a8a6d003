"""Stream positions as runs of consecutive offsets.

A source names every stream position by ``(source, next offset)``, and the engine commits
the last one of each source with the state, so that a restart reads on from there
(:meth:`~renyiboost.stream.engine.StreamEngine.add`). A Kafka partition whose offsets skip
ahead has a position for every skipped offset (:meth:`~renyiboost.connectors.kafka.
KafkaTrainer._offset_positions`): after a trainer was down while retention deleted ten
million unread messages, the next message stands ten million positions on. Spelled out as a
list of tuples that gap took about a gigabyte; as a run it is three numbers.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import overload

import numpy as np


class PositionRuns(Sequence[tuple[str, int]]):
    """Positions ``0 … len − 1`` of a batch, grouped into runs: run ``r`` holds the
    ``lengths[r]`` positions of source ``sources[r]`` whose next offsets are
    ``firsts[r], firsts[r] + 1, …``.

    >>> runs = PositionRuns()
    >>> runs.extend("t:0", first=5, length=3)
    >>> runs.extend("t:1", first=1, length=1)
    >>> len(runs), runs[2], runs[3]
    (4, ('t:0', 7), ('t:1', 1))
    >>> runs.latest(1, 4)
    [('t:0', 7), ('t:1', 1)]
    """

    def __init__(self) -> None:
        self._sources: list[str] = []
        self._firsts: list[int] = []
        self._starts: list[int] = [0]  # position of each run's first; the last is the length

    def extend(self, source: str, first: int, length: int) -> None:
        """Append ``length`` positions of ``source`` with next offsets from ``first`` on
        (joined to the last run where they continue it)."""
        if length <= 0:
            return
        if (self._sources and self._sources[-1] == source
                and self._firsts[-1] + self._starts[-1] - self._starts[-2] == first):
            self._starts[-1] += length
            return
        self._sources.append(source)
        self._firsts.append(first)
        self._starts.append(self._starts[-1] + length)

    def __len__(self) -> int:
        return self._starts[-1]

    @overload
    def __getitem__(self, index: int) -> tuple[str, int]: ...
    @overload
    def __getitem__(self, index: slice) -> Sequence[tuple[str, int]]: ...
    def __getitem__(self, index: int | slice) -> tuple[str, int] | Sequence[tuple[str, int]]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        i = int(index) + (len(self) if index < 0 else 0)
        if not 0 <= i < len(self):
            raise IndexError(f"position {index} of {len(self)}")
        run = int(np.searchsorted(self._starts, i, side="right")) - 1
        return self._sources[run], self._firsts[run] + i - self._starts[run]

    def latest(self, start: int, stop: int) -> list[tuple[str, int]]:
        """The last position of every run that positions ``start … stop − 1`` reach, in
        order: what a dict of each source's latest offset needs of them, without a tuple
        per position."""
        stop = min(stop, len(self))
        if start >= stop:
            return []
        first = int(np.searchsorted(self._starts, start, side="right")) - 1
        last = int(np.searchsorted(self._starts, stop - 1, side="right")) - 1
        return [self[min(self._starts[run + 1], stop) - 1] for run in range(first, last + 1)]


def latest_offsets(positions: Sequence[tuple[str, int]], start: int,
                   stop: int) -> Sequence[tuple[str, int]]:
    """Positions ``start … stop − 1`` of ``positions`` for a dict of each source's latest
    offset: a :class:`PositionRuns` gives only each run's last, a plain sequence its
    slice."""
    if isinstance(positions, PositionRuns):
        return positions.latest(start, stop)
    return positions[start:stop]


__all__ = ["PositionRuns", "latest_offsets"]
