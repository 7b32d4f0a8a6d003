"""README's River example runs as written (the code a new user copies first)."""

from __future__ import annotations

import re
import warnings
from pathlib import Path

from renyiboost.exceptions import PrivacyLeakWarning

README = Path(__file__).resolve().parent.parent / "README.md"


def _river_example() -> str:
    section = README.read_text().split("## Using the River estimators", 1)[1]
    match = re.search(r"```python\n(.*?)```", section, re.DOTALL)
    assert match, "README's River section lost its example"
    return match.group(1)


def test_the_river_example_runs_with_the_defaults() -> None:
    namespace: dict = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrivacyLeakWarning)  # the example says why
        exec(compile(_river_example(), "README.md", "exec"), namespace)  # noqa: S102
    model = namespace["model"]
    guarantee = model.privacy_guarantee()
    assert guarantee.epsilon <= 1.0 and not guarantee.seeded_for_testing
    assert [until for until, _ in guarantee.stage_sigmas] == [250, 500, 1_000, 2_000, 4_000]
    assert model.release().version == model.engine.release_version > 40
