"""The public trigger schedule: at which stream positions rounds run.

DEVELOPERS invariant 3: whether and when a tree is released depends on public inputs only.
Here that is the count of stream positions and the configuration, nothing else.

Positions ``train_every``, ``2·train_every``, … fire triggers until the first multiple of
``train_every`` at or after ``warmup`` (the trigger that releases the initial score, ``t0``).
From there each interval is ``growth`` times the positions so far, at least
``train_every`` and at most ``max_train_every``:

    t(k+1) = t(k) + min(max_train_every, max(train_every, ⌈growth · t(k)⌉)).

From ``end`` on (a hinted stream's expected end, when given) the cap is
``max_every_beyond_end`` instead: a stream that outgrows its hint gets trees at the rate the
schedule sets for it there, not at the hinted stream's short intervals forever.

``growth = 0`` is a fixed interval. With ``growth > 0`` the trees come often while the
stream is short and the pool small, and the interval grows with the stream, so that a
record's budget is not spent on many trees grown from a few hundred records (each tree's
noise does not shrink with the pool; its signal does). After ``P`` positions the growth
phase has released about ``ln(P / t0) / ln(1 + growth)`` trees; once the interval reaches
``max_train_every`` it stays there, so an unbounded stream keeps getting trees.
"""

from __future__ import annotations

import math

#: The range of a growing schedule's ``growth`` (0 is a fixed interval). Past 10 an interval
#: of ten times the positions so far leaves a stream a handful of trees, and ``growth · t``
#: overflowed (review Y #4); below 0.001 the growth phase runs for ``ln(cap / floor) / growth``
#: triggers, a walk of 10⁵ steps and more that a single call made from scratch (review Y #5).
MIN_TRIGGER_GROWTH, MAX_TRIGGER_GROWTH = 0.001, 10.0


def check_growth(growth: float) -> float:
    """``growth`` if a schedule can grow by it, else a ``ValueError`` saying the range."""
    if not 0 <= growth < math.inf:  # a NaN or infinite growth too
        raise ValueError(f"trigger_growth must be a finite number >= 0, got {growth!r}")
    if growth != 0 and not MIN_TRIGGER_GROWTH <= growth <= MAX_TRIGGER_GROWTH:
        raise ValueError(f"trigger_growth must be 0 (a fixed interval) or in "
                         f"[{MIN_TRIGGER_GROWTH:g}, {MAX_TRIGGER_GROWTH:g}], got {growth!r}")
    return growth


class TriggerSchedule:
    """The positions at which triggers fire (a pure function of the configuration).

    >>> s = TriggerSchedule(train_every=10, warmup=100, growth=0.5, max_train_every=200)
    >>> [s.next_after(p) for p in (0, 95, 100, 150, 225, 338, 1000)]
    [10, 100, 150, 225, 338, 507, 1107]
    """

    def __init__(self, train_every: int, warmup: int, growth: float = 0.0,
                 max_train_every: int | None = None, final_at: int | None = None,
                 end: int | None = None, max_every_beyond_end: int | None = None) -> None:
        for name, value in (("train_every", train_every), ("warmup", warmup)):
            if not (1 <= value < math.inf):
                raise ValueError(f"{name} must be a finite number >= 1, got {value!r}")
        check_growth(growth)
        self.train_every = int(train_every)
        self.growth = float(growth)
        self.max_train_every = (self.train_every if max_train_every is None
                                else max(self.train_every, int(max_train_every)))
        self.first = self.train_every * math.ceil(warmup / self.train_every)
        #: An extra trigger at the expected end of the stream (a public position), if any.
        self.final_at = final_at
        #: From the position ``end`` on, intervals are capped at ``max_every_beyond_end``.
        self.end = None if end is None or max_every_beyond_end is None else int(end)
        self.max_every_beyond_end = (self.max_train_every if self.end is None else max(
            self.train_every, int(max_every_beyond_end)))  # type: ignore[arg-type]
        #: The furthest ``(count, trigger)`` a walk reached: a stream asks about growing
        #: positions, and each call walked from ``first`` again (review Y #5).
        self._reached = (1, self.first)

    def cap_at(self, trigger: int) -> int:
        """The largest interval after the trigger at ``trigger``."""
        beyond = self.end is not None and trigger >= self.end
        return self.max_every_beyond_end if beyond else self.max_train_every

    def interval_after(self, trigger: int) -> int:
        """Positions from the trigger at ``trigger`` (≥ ``first``) to the next one."""
        cap, grown = self.cap_at(trigger), self.growth * trigger
        return cap if grown >= cap else max(self.train_every, math.ceil(grown))

    def next_after(self, position: int) -> int:
        """The first trigger position strictly after ``position`` (the regular ones and
        ``final_at``)."""
        regular = self.regular_after(position)
        if self.final_at is not None and position < self.final_at < regular:
            return self.final_at
        return regular

    def is_regular(self, position: int) -> bool:
        """Whether ``position`` is a regular trigger (not only the final one)."""
        return position >= 1 and self.regular_after(position - 1) == position

    def regular_after(self, position: int) -> int:
        """The first regular trigger position strictly after ``position``."""
        every = self.train_every
        if position < self.first or self.growth == 0.0:
            return every * (position // every + 1)
        last = self._through(position)[1]
        return last + self.interval_after(last)

    def releases_until(self, position: int) -> int:
        """Triggers from the first (``t0``, the initial score's) up to ``position``
        inclusive: the rounds a record present from the start takes part in by then
        (with one tree per trigger).

        >>> TriggerSchedule(train_every=10, warmup=100, growth=0.5,
        ...                 max_train_every=200).releases_until(1000)
        7
        """
        return self._through(position)[0]

    def _through(self, position: int) -> tuple[int, int]:
        """The triggers from ``first`` up to ``position`` inclusive and the last of them
        (``first`` when there is none). A walk over the growing intervals (logarithmically
        many) that crosses a stretch at a cap in one step, to ``end`` if the cap changes
        there, else to ``position``."""
        if position < self.first:
            return 0, self.first
        count, trigger = self._reached if self._reached[1] <= position else (1, self.first)
        while True:
            if trigger > self._reached[1]:
                self._reached = (count, trigger)
            step = self.interval_after(trigger)
            if step == self.cap_at(trigger):
                steady = self.end is None or trigger >= self.end
                stop = position if steady else min(position, self.end - 1)  # type: ignore[operator]
                more = max(0, (stop - trigger) // step)
                count, trigger = count + more, trigger + more * step
                if steady:
                    return count, trigger
            if trigger + step > position:
                return count, trigger
            count, trigger = count + 1, trigger + step
