"""The library's errors cross process boundaries intact: a record refused in a worker (a
process pool, a Ray shard) reaches the caller as the same error, with its reason."""

from __future__ import annotations

import inspect
import multiprocessing
import pickle
from concurrent.futures import ProcessPoolExecutor

import pytest

from renyiboost import exceptions
from renyiboost.exceptions import InvalidRecord, RenyiboostError, ShardUnavailable

ERRORS = [cls for _, cls in inspect.getmembers(exceptions, inspect.isclass)
          if issubclass(cls, RenyiboostError)]


def _instance(cls: type[RenyiboostError]) -> RenyiboostError:
    """One instance of ``cls``, built with arguments of the kinds its signature names."""
    sample = {"reason": "label", "detail": "label 5.0 is outside the public target_bounds",
              "shard": 3}
    names = [name for name in inspect.signature(cls.__init__).parameters if name != "self"]
    if names and names != ["args", "kwargs"]:
        return cls(*[sample[name] for name in names])
    return cls("a message")


@pytest.mark.parametrize("cls", ERRORS, ids=lambda cls: cls.__name__)
def test_every_error_survives_pickling(cls: type[RenyiboostError]) -> None:
    error = _instance(cls)
    again = pickle.loads(pickle.dumps(error))
    assert type(again) is cls
    assert str(again) == str(error)
    assert vars(again) == vars(error)  # reason, detail, shard …


def _refuse_label() -> None:
    from renyiboost import SGBDTRegressor

    model = SGBDTRegressor({"a": (0, 1)}, target_bounds=(0, 1), epsilon=1.0)
    model.learn_one({"a": 0.5}, 5.0)


def test_a_record_refused_in_a_worker_process_reaches_the_caller_with_its_reason() -> None:
    spawn = multiprocessing.get_context("spawn")  # no fork of the suite's threads
    with ProcessPoolExecutor(1, mp_context=spawn) as pool, pytest.raises(
            InvalidRecord, match="target_bounds") as caught:
        pool.submit(_refuse_label).result(timeout=120)
    assert caught.value.reason == "label"


def test_a_lost_shard_names_itself_after_pickling() -> None:
    again = pickle.loads(pickle.dumps(ShardUnavailable(2, "killed")))
    assert (again.shard, again.detail, str(again)) == (2, "killed",
                                                       "shard 2 is unavailable: killed")
