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
from typing import NamedTuple, overload

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

    def extend_runs(self, sources: Sequence[str], firsts: np.ndarray,
                    lengths: np.ndarray) -> None:
        """:meth:`extend` with each ``(sources[i], firsts[i], lengths[i])`` in turn, as
        whole arrays: stretches that continue one another become one run, found by
        comparing neighbours rather than by a call per stretch.

        >>> runs = PositionRuns()
        >>> runs.extend_runs(["t:0", "t:0", "t:1"], np.array([1, 3, 1]), np.array([2, 4, 1]))
        >>> runs.latest(0, len(runs))
        [('t:0', 6), ('t:1', 1)]
        """
        firsts, lengths = np.asarray(firsts, dtype=np.int64), np.asarray(lengths, np.int64)
        keep = lengths > 0
        if not keep.any():
            return
        names = np.asarray(sources, dtype=object)[keep]
        firsts, lengths = firsts[keep], lengths[keep]
        joins = np.zeros(len(firsts), dtype=bool)
        joins[1:] = (names[1:] == names[:-1]) & (firsts[1:] == firsts[:-1] + lengths[:-1])
        heads = np.flatnonzero(~joins)
        run_lengths = np.add.reduceat(lengths, heads)
        self.extend(names[0], int(firsts[0]), int(run_lengths[0]))  # may join the last run
        self._sources.extend(names[heads[1:]].tolist())
        self._firsts.extend(firsts[heads[1:]].tolist())
        self._starts.extend((self._starts[-1] + np.cumsum(run_lengths[1:])).tolist())

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


class OffsetPositions(NamedTuple):
    """What :func:`offset_positions` makes of a batch of messages."""

    #: Every position of the batch: each message's, and before it one per offset skipped.
    positions: PositionRuns
    #: Each message's index among :attr:`positions`.
    at: np.ndarray
    #: The offset each message's source was expected at (one past its last message's): a
    #: message below it means the partition went back, and counting goes on from it.
    expected_offset: np.ndarray
    #: Offsets skipped before each message: empty positions.
    skipped: np.ndarray


def offset_positions(sources: Sequence[str], offsets: np.ndarray,
                     expected: dict[str, int]) -> OffsetPositions:
    """The stream positions of a batch of messages, one per *offset* of each source
    (partition): every offset from the one ``expected`` after the source's last message up
    to each message's own is a position, the skipped ones empty. ``expected`` (source →
    next offset) is updated in place; a source it lacks starts at its first message. An
    offset below the expected one (the partition went back) counts on from itself.

    Vectorised over the messages: the only loop is over the batch's distinct sources.

    >>> expected = {"t:0": 3}
    >>> batch = offset_positions(["t:0", "t:1", "t:0"], np.array([5, 7, 6]), expected)
    >>> batch.positions.latest(0, len(batch.positions)), batch.at.tolist()
    ([('t:0', 6), ('t:1', 8), ('t:0', 7)], [2, 3, 4])
    >>> batch.skipped.tolist(), expected
    ([2, 0, 0], {'t:0': 7, 't:1': 8})
    """
    offsets = np.asarray(offsets, dtype=np.int64)
    names = np.asarray(sources, dtype=object)
    previous = np.empty(len(offsets), dtype=np.int64)  # the offset each message follows on
    for source in dict.fromkeys(sources):  # the distinct sources, in order
        mine = np.flatnonzero(names == source)
        previous[mine[0]] = expected.get(source, offsets[mine[0]])
        previous[mine[1:]] = offsets[mine[:-1]] + 1
        expected[source] = int(offsets[mine[-1]]) + 1
    firsts = np.minimum(previous, offsets)
    skipped = offsets - firsts
    positions = PositionRuns()
    positions.extend_runs(sources, firsts + 1, skipped + 1)
    return OffsetPositions(positions, np.cumsum(skipped + 1) - 1, previous, skipped)


def latest_offsets(positions: Sequence[tuple[str, int]], start: int,
                   stop: int) -> Sequence[tuple[str, int]]:
    """Positions ``start … stop − 1`` of ``positions`` for a dict of each source's latest
    offset: a :class:`PositionRuns` gives only each run's last, a plain sequence its
    slice."""
    if isinstance(positions, PositionRuns):
        return positions.latest(start, stop)
    return positions[start:stop]


__all__ = ["OffsetPositions", "PositionRuns", "latest_offsets", "offset_positions"]
