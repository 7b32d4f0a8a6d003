"""A privacy budget shared by the models trained on the same data (issue 16, item 5), and
the warning inside River's model-selection wrappers.

Would these fail if a model spent without being charged, if a refused model still read the
data, or if a refit were free? Each is asserted."""

from __future__ import annotations

import copy
import warnings

import numpy as np
import pytest
from river import bandit, datasets, metrics, model_selection

from renyiboost import SGBDTClassifier
from renyiboost.accounting.budget import PrivacyAccountant
from renyiboost.exceptions import (
    BudgetExceeded,
    NonPrivateWarning,
    PrivacyLeakWarning,
    TestingOnlyWarning,
)
from renyiboost.models.additive import DPAdditiveBoost
from renyiboost.models.batch import SGBDT
from renyiboost.models.diprime import DiPriMe
from renyiboost.models.dpboost import DPBoost
from renyiboost.models.fedxgboost import FedXGBoostLDP
from renyiboost.schema import PublicSchema

warnings.simplefilter("ignore", TestingOnlyWarning)
SCHEMA = PublicSchema(features={"a": (0.0, 1.0), "b": (0.0, 1.0)})
X = np.random.default_rng(0).uniform(0, 1, (600, 2))
Y = (X[:, 0] > 0.5).astype(float)


def test_charges_add_up_and_an_overspend_is_refused_without_a_trace() -> None:
    budget = PrivacyAccountant(epsilon=2.0, delta=1e-6)
    budget.charge("a", 1.2, 4e-7)
    with pytest.raises(BudgetExceeded, match="would spend ε = 0.9 of a budget with ε = 0.8"):
        budget.charge("b", 0.9, 0.0)
    with pytest.raises(BudgetExceeded, match="δ"):
        budget.charge("c", 0.1, 7e-7)
    with pytest.raises(BudgetExceeded, match="without privacy"):
        budget.charge("d", None, None)
    assert [c.name for c in budget.charges] == ["a"]
    budget.charge("e", 0.8, 6e-7)  # exactly what is left fits
    assert budget.remaining_epsilon == pytest.approx(0.0, abs=1e-12)
    spent = PrivacyAccountant(epsilon=1.0, delta=1e-6)
    spent.charge("all but a trace", 1.0 - 1e-10, 0.0)  # what a refusal shows is left: not
    with pytest.raises(BudgetExceeded, match=r"with ε = 0 left \(of 1;"):  # "1e-10 left"
        spent.charge("next", 0.5, 0.0)


@pytest.mark.parametrize(("epsilon", "delta", "message"), [
    (True, 1e-6, "epsilon must be a finite number > 0, got True"),
    ("1", 1e-6, "epsilon must be"),
    (float("inf"), 1e-6, "epsilon must be"),
    (1.0, 0.5, "delta must be at most 0.01"),
    (1.0, -1e-9, "0 <= delta < 1"),
    (1.0, "1e-6", "0 <= delta < 1"),
])
def test_a_total_is_checked_as_a_learner_checks_its_target(epsilon, delta, message) -> None:
    """The accountant reads ε and δ through the learners' checks (accounting/inputs.py): a
    bool is not ε = 1 and a δ that no learner accepts is no total either. δ = 0 stays a
    valid total, for pure-DP mechanisms only."""
    with pytest.raises(ValueError, match=message):
        PrivacyAccountant(epsilon=epsilon, delta=delta)
    assert PrivacyAccountant(epsilon=1, delta=0).delta == 0.0


def test_every_fit_of_a_batch_model_draws_and_a_refused_fit_reads_nothing(monkeypatch) -> None:
    budget = PrivacyAccountant(epsilon=2.5, delta=1e-5)
    first = SGBDT(SCHEMA, seed=0, task="classification", epsilon=1.0, rounds=3, depth=1,
                  expected_records=600).draw_from(budget, "first")
    first.fit(X, Y)
    first.fit(X, Y)  # a refit reads the records again: charged again
    assert [(c.name, c.epsilon, c.delta) for c in budget.charges] == [
        ("first", 1.0, 1e-6), ("first", 1.0, 1e-6)]
    second = SGBDT(SCHEMA, seed=0, task="classification", epsilon=1.0, rounds=3, depth=1,
                   expected_records=600).draw_from(budget)
    from renyiboost.models import booster

    def no_round(*args, **kwargs):  # a refused fit must not get this far
        raise AssertionError("a refused fit ran a round")

    monkeypatch.setattr(booster.SGBDTBooster, "plan_round", no_round)
    with pytest.raises(BudgetExceeded, match="first 1, first 1"):
        second.fit(X, Y)
    assert second.ensemble is None and len(budget.charges) == 2


FIT_TWICE = {
    "sgbdt": lambda: SGBDT(SCHEMA, seed=0, task="classification", epsilon=1.0, rounds=3,
                           depth=1, expected_records=600),
    "dpboost": lambda: DPBoost(SCHEMA, seed=0, task="classification", epsilon=1.0, rounds=2),
    "diprime": lambda: DiPriMe(SCHEMA, seed=0, task="classification", epsilon=1.0),
    "additive": lambda: DPAdditiveBoost(SCHEMA, seed=0, task="classification", epsilon=1.0),
    "fedxgboost": lambda: FedXGBoostLDP(SCHEMA, seed=0, task="classification", epsilon=1.0),
}


@pytest.mark.parametrize("name", FIT_TWICE)
def test_a_second_fit_without_a_shared_budget_says_it_spends_epsilon_again(name) -> None:
    """A model's guarantee states its last fit alone; a refit on overlapping rows spends ε
    again, which only a shared budget counts. Without one the second fit warns; with one
    the accountant's charges say it, and there is no warning (FedXGBoost's label LDP cannot
    draw from one)."""
    model = FIT_TWICE[name]()
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model.fit(X, Y)  # a first fit is what the guarantee states: silent
    with pytest.warns(PrivacyLeakWarning, match=r"called again \(fit 2\).*sum of their ε and δ"):
        model.fit(X, Y)
    with pytest.warns(PrivacyLeakWarning, match=r"\(fit 3\)"):
        model.fit(X, Y)
    late = PrivacyAccountant(epsilon=3.0, delta=1e-5)  # a fitted model joined it silently,
    with pytest.raises(ValueError, match="before the first fit.*fitted 3 time"):
        model.draw_from(late)  # and its fits were never counted (review A)
    assert model.accountant is None and late.charges == []
    if name == "fedxgboost":
        return
    shared = FIT_TWICE[name]().draw_from(PrivacyAccountant(epsilon=3.0, delta=1e-5))
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        shared.fit(X, Y)
        shared.draw_from(shared.accountant)  # the budget it draws from: nothing to miss
        shared.fit(X, Y)
    assert len(shared.accountant.charges) == 2
    with pytest.raises(ValueError, match="charged to another budget"):
        shared.draw_from(late)


def test_a_model_without_privacy_says_so_when_it_is_built() -> None:
    """``epsilon=None`` is a model without noise or accounting: allowed (comparison rows),
    but never silently, in batch and on a stream; a private model does not warn."""
    with pytest.warns(NonPrivateWarning, match="without differential privacy"):
        SGBDT(SCHEMA, task="classification", epsilon=None, rounds=3, depth=1).fit(X, Y)
    features = {"a": (0.0, 1.0), "b": (0.0, 1.0)}
    with pytest.warns(NonPrivateWarning, match="private=False"):
        SGBDTClassifier(features, epsilon=None)
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        SGBDTClassifier(features, epsilon=1.0)
        SGBDT(SCHEMA, task="classification", epsilon=1.0, rounds=3, depth=1,
              expected_records=600).fit(X, Y)


def test_a_fit_whose_noise_cannot_reach_epsilon_fails_before_it_is_charged() -> None:
    """A calibration that fails (ε = 0.05 with orders up to 8) spends nothing: it once
    failed after the accountant was charged, which wasted the ε of a fit that read no row."""
    budget = PrivacyAccountant(epsilon=1.0, delta=1e-5)
    tiny = SGBDT(SCHEMA, task="classification", epsilon=0.05, max_order=8, rounds=100,
                 expected_records=600).draw_from(budget, "tiny")
    with pytest.raises(ValueError, match="no noise scale reaches"):
        tiny.fit(X, Y)
    assert budget.charges == [] and tiny.ensemble is None


def test_the_fields_learners_draw_their_guarantee_and_label_ldp_is_refused() -> None:
    budget = PrivacyAccountant(epsilon=10.0, delta=1e-5)
    DPBoost(SCHEMA, seed=0, task="classification", epsilon=1.0, rounds=2).draw_from(
        budget, "dpboost").fit(X, Y)
    DiPriMe(SCHEMA, seed=0, task="classification", epsilon=2.0).draw_from(
        budget, "diprime").fit(X, Y)
    DPAdditiveBoost(SCHEMA, seed=0, task="classification", epsilon=1.5).draw_from(
        budget, "gam").fit(X, Y)
    assert [(c.name, c.epsilon) for c in budget.charges] == [
        ("dpboost", 1.0), ("diprime", 2.0), ("gam", 1.5)]
    assert budget.charges[2].delta > 0 and budget.charges[0].delta == 0.0
    ldp = FedXGBoostLDP(SCHEMA, seed=0, task="classification", epsilon=1.0).draw_from(budget)
    with pytest.raises(BudgetExceeded, match="labels only"):
        ldp.fit(X, Y)
    assert len(budget.charges) == 3


def _phishing_candidates(n: int) -> list[SGBDTClassifier]:
    features = {name: (0, 1) for name in next(iter(datasets.Phishing()))[0]}
    return [SGBDTClassifier(features, epsilon=1.0, rounds=5, depth=2, train_every=50,
                            warmup=50, learning_rate=lr, seed=1) for lr in (0.1, 0.3, 0.5)[:n]]


def test_a_stream_draws_its_lifetime_guarantee_once() -> None:
    budget = PrivacyAccountant(epsilon=2.5, delta=1e-5)
    first, second, third = _phishing_candidates(3)
    first.draw_from(budget)
    second.draw_from(budget)
    with pytest.raises(BudgetExceeded, match="already drew"):
        first.draw_from(budget)
    with pytest.raises(BudgetExceeded, match="would spend"):
        third.draw_from(budget)
    assert budget.spent_epsilon == pytest.approx(2 * first.privacy_guarantee().epsilon)


def test_a_draw_comes_before_learning_and_a_copy_that_may_learn_draws_too() -> None:
    """A model that had read 500 records could still draw, after the fact; and a deepcopy of
    a drawn model learned on the original's one charge (two models at ε = 1 on the same
    records, one ε = 1 charged). Now a late draw is refused, and a copy that may learn
    draws for itself or is refused; a copy of a model that learned cannot learn (no draw)."""
    budget = PrivacyAccountant(epsilon=2.5, delta=1e-5)
    late, drawn = _phishing_candidates(2)
    for x, y in datasets.Phishing().take(20):
        late.learn_one(x, y)
    with pytest.raises(ValueError, match="before the first learn_one"):
        late.draw_from(budget)
    assert budget.charges == []
    drawn.draw_from(budget)
    copy.deepcopy(drawn)  # may learn: it draws
    assert budget.spent_epsilon == pytest.approx(2 * drawn.privacy_guarantee().epsilon)
    with pytest.raises(BudgetExceeded, match="would spend"):
        copy.deepcopy(drawn)
    for x, y in datasets.Phishing().take(20):
        drawn.learn_one(x, y)
    copy.deepcopy(drawn)  # a copy of a ledger answers only: nothing to draw
    assert len(budget.charges) == 2


def test_river_model_selection_over_private_candidates_warns_unless_they_share_a_budget(
) -> None:
    def run(models: list[SGBDTClassifier]) -> list[warnings.WarningMessage]:
        selector = model_selection.BanditClassifier(models, metrics.Accuracy(),
                                                    bandit.EpsilonGreedy(0.1, seed=1))
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for x, y in datasets.Phishing().take(60):
                selector.learn_one(x, y)
        return [w for w in caught if issubclass(w.category, PrivacyLeakWarning)
                and "BanditClassifier" in str(w.message)]

    assert run(_phishing_candidates(3))
    budget = PrivacyAccountant(epsilon=3.5, delta=1e-5)
    shared = [model.draw_from(budget) for model in _phishing_candidates(3)]
    assert not run(shared)
    # alone, outside a wrapper: no such warning
    model = _phishing_candidates(1)[0]
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for x, y in datasets.Phishing().take(5):
            model.learn_one(x, y)
    assert not [w for w in caught if "BanditClassifier" in str(w.message)]


def test_river_compositions_the_guarantee_does_not_cover_warn() -> None:
    """A scaler before the model moves every later record's features by its running mean;
    an ensemble's members (bagging: a record several times, fresh ids each) spend the sum of
    their ε. Both ran with no privacy warning; a stateless step stays quiet."""
    from river import compose, ensemble, preprocessing

    def leaks(wrapped) -> list[str]:
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            for x, y in datasets.Phishing().take(5):
                wrapped.learn_one(x, y)
        return [str(w.message) for w in caught if issubclass(w.category, PrivacyLeakWarning)
                and "keyless" not in str(w.message) and "without a key" not in str(w.message)]

    scaled = leaks(preprocessing.StandardScaler() | _phishing_candidates(1)[0])
    assert len(scaled) == 1 and "StandardScaler" in scaled[0]
    union = compose.TransformerUnion(compose.Select("empty_server_form_handler"),
                                     preprocessing.MinMaxScaler())
    assert "MinMaxScaler" in leaks(union | _phishing_candidates(1)[0])[0]
    names = list(next(iter(datasets.Phishing()))[0])
    assert not leaks(compose.Select(*names) | _phishing_candidates(1)[0])
    bagged = leaks(ensemble.BaggingClassifier(_phishing_candidates(1)[0], n_models=3, seed=1))
    assert bagged and "BaggingClassifier" in bagged[0]


def test_river_wrappers_that_decide_what_the_model_learns_warn() -> None:
    """River's samplers repeat or drop records by their label (the positions then depend on
    the data) and its target scalers move every label by running statistics (the target's
    bounds read from the data): any River wrapper but a pipeline of stateless steps and a
    plain ``TargetTransformRegressor`` warns, through ``learn_one`` and ``learn_many``; a
    model that learned alone and is then wrapped is judged again."""
    import math

    import pandas as pd
    from river import compose, imblearn, preprocessing

    from renyiboost import SGBDTRegressor

    def caught(learn) -> list[str]:
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            learn()
        return [str(w.message) for w in seen if issubclass(w.category, PrivacyLeakWarning)
                and "without a key" not in str(w.message)]

    stream = list(datasets.Phishing().take(30))
    sampler = imblearn.RandomOverSampler(_phishing_candidates(1)[0], {False: 0.5, True: 0.5},
                                         seed=1)
    said = caught(lambda: [sampler.learn_one(x, y) for x, y in stream])
    assert len(said) == 1 and "RandomOverSampler (river.imblearn" in said[0]

    def regressor() -> SGBDTRegressor:
        return SGBDTRegressor({"a": (0.0, 1.0)}, target_bounds=(0.0, 1.0), epsilon=1.0, seed=0)

    scaled = preprocessing.TargetMinMaxScaler(regressor())
    assert "TargetMinMaxScaler" in caught(lambda: scaled.learn_one({"a": 0.5}, 0.5))[0]
    plain = compose.TargetTransformRegressor(regressor(), func=math.sqrt, inverse_func=math.sqrt)
    assert not caught(lambda: plain.learn_one({"a": 0.5}, 0.25))

    frame, labels = pd.DataFrame({"a": [0.1, 0.9]}), pd.Series([0.2, 0.8])
    alone = regressor()
    assert not caught(lambda: alone.learn_many(frame, labels, keys=["k1", "k2"]))
    piped = preprocessing.StandardScaler() | alone  # the same model, wrapped afterwards
    said = caught(lambda: piped.learn_many(frame, labels))
    assert len(said) == 1 and "StandardScaler" in said[0]
    rewrapped = regressor()  # one River method (Pipeline.learn_one) runs both pipelines
    selected = compose.Select("a") | rewrapped
    assert not caught(lambda: selected.learn_one({"a": 0.5}, 0.5))
    scaled_after = preprocessing.MinMaxScaler() | rewrapped
    assert "MinMaxScaler" in caught(lambda: scaled_after.learn_one({"a": 0.5}, 0.5))[0]


def test_a_river_clone_of_a_drawn_estimator_draws_for_itself() -> None:
    """River's ``clone()`` goes through ``__init__``: the clone of an estimator that drew
    from a shared budget learned on an uncharged ε. It draws from the same accountant now,
    or is refused as a copy is."""
    budget = PrivacyAccountant(epsilon=2.5, delta=1e-5)
    model = _phishing_candidates(1)[0].draw_from(budget, "original")
    clone = model.clone()
    assert [c.name for c in budget.charges] == ["original", "SGBDTClassifier 2"]
    assert clone._drawn_from is budget
    with pytest.raises(BudgetExceeded, match="charged so far: original 1, SGBDTClassifier 2 1"):
        model.clone()
    assert len(budget.charges) == 2
    assert _phishing_candidates(1)[0].clone()._drawn_from is None  # undrawn: nothing charged


def test_a_river_clone_of_a_model_that_learned_warns_of_a_second_ledger() -> None:
    """Without a shared budget, the clone of a model that has learned is a new ledger: if
    it learns the same records, each key spends its budget in both, and nothing said so.
    It warns now; a clone of a model that learned nothing, or of a non-private one, does
    not."""
    model = _phishing_candidates(1)[0]
    with warnings.catch_warnings():
        warnings.simplefilter("error", PrivacyLeakWarning)
        model.clone()  # learned nothing yet
        model.learn_one({name: 0 for name in model.features}, True, key="k0")
    with pytest.warns(PrivacyLeakWarning, match="learned 1 records: the clone keeps a ledger "
                                                "of its own.*draw_from"):
        model.clone()


def test_no_charge_passes_the_total_and_a_model_planned_at_what_is_left_fits() -> None:
    """A slack of 1e-9 of the total let the models' ε and δ add up past the budget (review
    Q #1: ε 1.0000000009 of 1). Charges are now held to the total exactly, and what
    ``remaining_epsilon`` says is left still fits, however the sums round."""
    import math

    budget = PrivacyAccountant(epsilon=1.0, delta=1e-6)
    budget.charge("a", 0.6, 5e-7)
    with pytest.raises(BudgetExceeded, match="0.4000000009"):
        budget.charge("b", 0.4 + 9e-10, 0.0)
    with pytest.raises(BudgetExceeded, match="δ"):
        budget.charge("b", 0.1, 5e-7 + 4e-16)
    for charges in ([0.1, 0.2], [0.3] * 3, [1 / 3, 1 / 7, 1 / 11], [0.6]):
        budget = PrivacyAccountant(epsilon=1.0, delta=1e-6)
        for i, eps in enumerate(charges):
            budget.charge(f"m{i}", eps, 1e-7 / 3)
        budget.charge("last", budget.remaining_epsilon, budget.remaining_delta)
        assert math.fsum(c.epsilon for c in budget.charges) <= 1.0
        assert math.fsum(c.delta for c in budget.charges) <= 1e-6
    budget = PrivacyAccountant(epsilon=1.0, delta=1e-6)
    for i, eps in enumerate([0.1, 0.2]):
        budget.charge(f"m{i}", eps, 0.0)
    with pytest.raises(BudgetExceeded):  # what is left is the largest charge that fits
        budget.charge("more", math.nextafter(budget.remaining_epsilon, 2.0), 0.0)
