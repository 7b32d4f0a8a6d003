"""Warnings raised by renyiboost.

They follow diffprivlib's model: a privacy-relevant shortcut is never silent.
"""

from __future__ import annotations


class PrivacyLeakWarning(UserWarning):
    """A public input (feature bounds, label bounds, category set) was read from the data.

    Reading bounds from the records themselves is not covered by the privacy guarantee:
    the released model then leaks information about the extreme or rare values.
    """


class TestingOnlyWarning(UserWarning):
    """The noise was drawn from a seeded pseudo-random generator.

    A seeded model is reproducible, which is what tests need, but its noise is predictable
    to anyone who knows the seed, so the privacy guarantee does not hold.
    """

    __test__ = False  # not a pytest test class despite the name
