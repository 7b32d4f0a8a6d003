"""The msgspec batch path of the Kafka event parser against the per-message reference.

:meth:`EventParser.parse` (pydantic-core's JSON parser and the ``RecordValidator``) is the
reference; :meth:`EventParser.parse_batch` decodes with msgspec and must accept and reject
exactly the same messages, with the same reasons and details and the same rows and labels
*bit for bit* (``-0.0`` and NaN included), and count the same values outside the public
bounds. Every comparison runs the batch on one parser and the reference on a twin with its
own validator, so the telemetry counts are compared too.
"""

from __future__ import annotations

import json
import warnings

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from renyiboost.connectors.events import EventFormat, EventParser, ParsedBatch, event_json
from renyiboost.exceptions import SchemaMismatchWarning
from renyiboost.schema import PublicSchema
from renyiboost.validation import RecordValidator

#: Numbers, then categories whose domains mix kinds: 0 finds False, 1 and True find nothing.
_FEATURES = {"length": (0.0, 1.0), "height": (-1.0, 1.0), "sex": ["F", "I", "M"],
             "flag": ["a", 7, False]}


def _twins(task: str = "regression", strict: bool = False, event_format: EventFormat | None = None,
           features: dict | None = None) -> tuple[EventParser, EventParser]:
    """Two identical parsers with their own validators: the batch path's and the reference's."""
    def one() -> EventParser:
        schema = PublicSchema(features=features or _FEATURES,
                              target_bounds=(0.0, 30.0) if task == "regression" else None)
        return EventParser(RecordValidator(schema, task, strict=strict), event_format)

    return one(), one()


def _identical(fast: ParsedBatch, slow: ParsedBatch) -> None:
    assert fast.index == slow.index
    assert fast.keys == slow.keys
    assert np.array(fast.labels, dtype=float).tobytes() == np.array(slow.labels).tobytes()
    assert fast.rows.shape == slow.rows.shape
    assert fast.rows.tobytes() == slow.rows.tobytes()  # bit for bit: -0.0, NaN
    assert fast.rejected == slow.rejected


def _check(values: list, keys: list | None = None, **twins) -> ParsedBatch:
    """parse_batch on one twin, parse per message on the other: identical, counts too."""
    keys = keys if keys is not None else [f"k{i}".encode() for i in range(len(values))]
    batch, reference = _twins(**twins)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaMismatchWarning)
        fast = batch.parse_batch(values, keys)
        slow = reference.parse_each(values, keys)
    _identical(fast, slow)
    np.testing.assert_array_equal(batch.validator.outside, reference.validator.outside)
    return fast


def _event(x: dict, y=5.0) -> bytes:
    return json.dumps({"x": x, "y": y}).encode()


_GOOD = [_event({"length": 0.5, "height": -0.25, "sex": "F", "flag": 7}),
         _event({"length": 2.0, "sex": "?", "flag": 0}, 0),  # clipped; "other"; 0 is not False
         _event({"height": None, "flag": True}, 30),  # missing; True is not in the domain
         _event({}, 1.5)]


def test_an_all_valid_batch_takes_the_fast_path_and_matches_the_reference() -> None:
    parser, _ = _twins()
    calls = []
    parse = parser.parse
    parser.parse = lambda *args: calls.append(args) or parse(*args)  # type: ignore[method-assign]
    values = _GOOD * 50
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", SchemaMismatchWarning)
        batch = parser.parse_batch(values, [f"k{i}".encode() for i in range(len(values))])
    assert not calls and not batch.rejected and len(batch.keys) == 200
    fast = _check(values)
    np.testing.assert_array_equal(fast.rows[1], [1.0, np.nan, 3.0, 3.0])  # "other" twice
    assert fast.labels[:4] == [5.0, 0.0, 30.0, 1.5]


def test_the_abalone_events_of_the_benchmark_match_the_reference() -> None:
    from renyiboost.stream.sources import InMemorySource

    data = InMemorySource("abalone").data
    rows = [data.schema.decode_row(r) for r in data.X[:1000]]
    values = [event_json(None, x, float(y)) for x, y in zip(rows, data.y[:1000], strict=True)]
    keys = [f"k{i}".encode() for i in range(len(values))]
    features = {name: list(spec) if isinstance(spec, list) else tuple(spec)
                for name, spec in data.schema.features.items()}
    batch, reference = _twins(features=features)
    _identical(batch.parse_batch(values, keys), reference.parse_each(values, keys))


#: One bad message of each reason (and some near misses that are valid).
_BAD = [
    (b"k", b'{"x": {"length": 0.5, "pad": "' + b"z" * 70_000 + b'"}, "y": 5}', "oversize"),
    (b"k", None, "json"),
    (b"k", b"{not json", "json"),
    (b"k", b"\xef\xbb\xbf" + _GOOD[0], "json"),  # a UTF-8 byte order mark is not JSON
    (b"k", b"\x0c" + _GOOD[0], "json"),  # form feed: not JSON whitespace
    (b"k", _GOOD[0] + b"{}", "json"),  # two documents in one message
    (b"k", b'{"x": {"sex": "\xff"}, "y": 5}', "json"),  # invalid UTF-8 in a string
    (b"k", b'{"x": {"sex": "\\ud800"}, "y": 5}', "json"),  # a lone surrogate
    (b"k", b'{"x": {"height": -Infinity}, "y": 5}', "schema"),
    (b"k", b'{"x": {"length": 1e400}, "y": 5}', "schema"),  # inf once parsed
    (b"k", b'{"x": {"length": 1' + b"0" * 400 + b"}, \"y\": 5}", "schema"),  # no float holds it
    (b"k", _event({"length": True}), "schema"),
    (b"k", _event({"length": "0.5"}), "schema"),
    (b"k", _event({"sex": ["F"]}), "schema"),
    (b"k", _event({"sex": {"F": 1}}), "schema"),
    (b"k", _event({"colour": 1}), "schema"),
    (b"k", json.dumps({"x": None, "y": 5}).encode(), "schema"),
    (b"k", json.dumps({"x": [], "y": 5}).encode(), "schema"),
    (b"k", json.dumps({"y": 5}).encode(), "schema"),
    (b"k", json.dumps({"x": {}}).encode(), "schema"),
    (b"k", json.dumps({"x": {}, "y": 5, "key": "k"}).encode(), "schema"),
    (b"k", b"[]", "schema"),
    (b"k", b"null", "schema"),
    (None, _GOOD[0], "missing_key"),
    (b"", _GOOD[0], "missing_key"),
    (b"\xff\xfe", _GOOD[0], "key"),
    (b"k" * 257, _GOOD[0], "key"),
    (b"k", _event({}, 30.5), "label"),
    (b"k", _event({}, -0.001), "label"),
    (b"k", _event({}, True), "label"),
    (b"k", _event({}, "5"), "label"),
    (b"k", _event({}, None), "label"),
    (b"k", _event({}, [5]), "label"),
    (b"k", b'{"x": {}, "y": NaN}', "label"),
    (b"k", b'{"x": {}, "y": 1e400}', "label"),
    (b"k", b'{"x": {}, "y": 1' + b"0" * 400 + b"}", "label"),
]


@pytest.mark.parametrize(("value", "row"), [
    (b'{"x": {"length": NaN, "height": 0.5}, "y": 5}', [np.nan, 0.5, np.nan, np.nan]),
    (_event({"length": float("nan"), "sex": float("nan")}), [np.nan] * 4),  # json.dumps' NaN
    (_event({"flag": 7.0, "sex": 1.0}), [np.nan, np.nan, 3.0, 1.0]),  # 7; 1 is "other"
    (_event({"flag": -0.0}), [np.nan, np.nan, np.nan, 3.0]),  # 0, which is not False
])
def test_nan_is_missing_and_a_whole_float_is_its_category_in_an_event(value, row) -> None:
    """What a dict gives ``learn_one`` an event gives the trainer: NaN (which Python's
    ``json.dumps`` writes for a float NaN) marks a missing value, and a whole-number float
    of a categorical feature is its integer. msgspec has no NaN literal and no float
    category, so the batch path hands these to the reference, which must accept them."""
    fast = _check([*_GOOD * 3, value, *_GOOD * 3])
    assert not fast.rejected
    np.testing.assert_array_equal(fast.rows[12], row)


@pytest.mark.parametrize(("key", "value", "reason"), _BAD,
                         ids=[f"{r}-{i}" for i, (_, _, r) in enumerate(_BAD)])
def test_one_bad_message_in_the_middle_of_a_valid_batch(key, value, reason) -> None:
    values = [*_GOOD * 3, value, *_GOOD * 3]
    keys = [f"k{i}".encode() for i in range(len(values))]
    keys[12] = key
    fast = _check(values, keys)
    assert [(i, why.reason) for i, why in fast.rejected] == [(12, reason)]
    assert fast.index == [i for i in range(25) if i != 12]


def test_a_batch_with_every_bad_message_interleaved() -> None:
    values, keys = [], []
    for i, (key, value, _) in enumerate(_BAD):
        values += [_GOOD[i % 4], value]
        keys += [f"g{i}".encode(), key]
    fast = _check(values, keys)
    assert [why.reason for _, why in fast.rejected] == [r for _, _, r in _BAD]
    assert len(fast.keys) == len(_BAD)


def test_huge_integers() -> None:
    big = 10**30
    fast = _check([
        _event({"length": big}),  # a float holds it: clipped
        _event({"height": -(2**64)}),
        _event({"flag": big}),  # a category beyond 64 bits: "other"
        _event({"flag": -(2**63) - 1}),
        _event({"length": 9007199254740993}),  # rounds to 2**53 (then clipped), as float() does
        _event({}, 2**64),  # a regression label too large for the bounds
        b'{"x": {"height": -1' + b"0" * 308 + b"}, \"y\": 5}",  # -1e308: clipped
        b'{"x": {"height": 1' + b"0" * 309 + b"}, \"y\": 5}",  # beyond the float range
    ])
    assert [i for i, _ in fast.rejected] == [5, 7]
    assert fast.rows[2][3] == 3.0 and fast.rows[3][3] == 3.0  # "other"


def test_huge_integer_keys_in_the_payload() -> None:
    fmt = EventFormat(key_field="user")
    values = [json.dumps({"user": key, "x": {}, "y": 1}).encode()
              for key in (10**40, -(2**64), 7, "7", True, 1.5, None, "", [1], "Zoe\u0308")]
    fast = _check(values, [b"ignored"] * len(values), event_format=fmt)
    assert fast.keys == [str(10**40), str(-(2**64)), "7", "7", "Zo\u00eb"]
    # a key of another type: "key", as learn_one's reason (it was "schema": review T #5)
    assert [why.reason for _, why in fast.rejected] == [
        "key", "key", "missing_key", "key", "key"]


def test_nested_wrong_types() -> None:
    values = [
        json.dumps({"x": {"length": {"length": 0.5}}, "y": 5}).encode(),
        json.dumps({"x": {"length": [0.5]}, "y": 5}).encode(),
        json.dumps({"x": {"x": {}}, "y": 5}).encode(),
        json.dumps({"x": "length=0.5", "y": 5}).encode(),
        json.dumps({"x": {}, "y": {"y": 5}}).encode(),
        b'{"x": {"length": ' + b"[" * 20_000 + b"]" * 20_000 + b"}, \"y\": 5}",  # too deep
        b'{"x": {}, "zz": ' + b"[" * 20_000 + b"]" * 20_000 + b', "y": 5}',
        *_GOOD,
    ]
    fast = _check(values)
    assert [why.reason for _, why in fast.rejected] == [
        "schema", "schema", "schema", "schema", "label", "json", "json"]  # too deep for JSON


def test_a_field_named_twice_in_one_object_is_refused_on_both_paths() -> None:
    """JSON parsers keep a repeated field's last value, so an event named a feature twice
    and lost one, or hid an out-of-bounds label behind a good one, without a word
    (invariant 7). Both paths now refuse it with reason ``schema``, naming the field,
    wherever it repeats; colons inside strings and features given as ``null`` are not
    repeats."""
    repeats = [
        (b'{"x": {"length": 0.5, "length": 0.75}, "y": 5}', "length"),
        (b'{"x": {"length": "bad", "length": 0.75}, "y": 5}', "length"),
        (b'{"x": {"length": 0.75, "length": null}, "y": 5}', "length"),
        (b'{"x": {"colour": 1}, "x": {"length": 0.25}, "y": 5}', "x"),
        (b'{"x": {"length": 0.25}, "y": "5", "y": 6}', "y"),
        (b'{"x": {"length": 0.25}, "y": 6, "y": 99}', "y"),
        (b'{"x": {"sex": "F", "sex" :"M"}, "y": 5}', "sex"),
        (b'{"x": {"sex": "a:b", "sex": "F"}, "y": 5}', "sex"),
    ]
    fine = [b'{"x": {"sex": "a:b\\":", "length": null, "height": null}, "y": 5}',
            b'{"x": {"length": 0.5}, "y": 5}']
    fast = _check([value for value, _ in repeats] + fine)
    assert fast.index == [8, 9]
    assert [why.reason for _, why in fast.rejected] == ["schema"] * len(repeats)
    for (_, why), (_, field) in zip(fast.rejected, repeats, strict=True):
        assert why.detail.startswith(f"the field {field!r} appears twice in one object")


def test_whitespace_around_and_inside_a_document() -> None:
    fast = _check([b" \t\r\n" + _GOOD[0] + b" \t\r\n", b'{ "x" :{"length":0.5 } ,"y":5 }\n',
                   b"\n", b"", b"   ", _GOOD[1]])
    assert fast.index == [0, 1, 5]
    assert [why.reason for _, why in fast.rejected] == ["json"] * 3


def test_negative_zero_and_other_number_spellings_bit_for_bit() -> None:
    fast = _check([b'{"x": {"height": -0.0}, "y": -0.0}', b'{"x": {"height": -0}, "y": -0}',
                   b'{"x": {"height": -0e0, "length": 0}, "y": 0E+0}',
                   b'{"x": {"height": 1E-400}, "y": 5.000000000000000000000000001}',
                   b'{"x": {"length": 0.1000000000000000055511151231257827}, "y": 1.7e1}',
                   b'{"x": {"length": 01}, "y": 5}', b'{"x": {"length": .5}, "y": 5}',
                   b'{"x": {"length": +1}, "y": 5}', b'{"x": {"length": 1.}, "y": 5}'])
    assert np.signbit(fast.rows[0][1]) and np.signbit(fast.labels[0])
    assert not np.signbit(fast.rows[1][1]) and not np.signbit(fast.labels[1])  # an int zero
    assert [why.reason for _, why in fast.rejected] == ["json"] * 4


def test_escaped_field_names_and_strings() -> None:
    fast = _check([b'{"\\u0078": {"len\\u0067th": 0.5, "sex": "\\u0046"}, "y": 5}',
                   b'{"x": {"sex": "F\\u0000"}, "y": 5}', b'{"x": {"sex": "a\x7fb"}, "y": 5}',
                   b'{"x": {"sex": "\xed\xa0\x80"}, "y": 5}'])
    assert fast.rows[0][2] == 0.0 and len(fast.keys) == 3


def test_classification_labels_strict_schemas_and_payload_keys() -> None:
    values = [_event({}, True), _event({}, False), _event({}, 1), _event({}, 0.0),
              _event({}, -0.0), _event({}, 0.5), _event({}, 2), _event({}, "1"), _event({}, None)]
    fast = _check(values, task="classification")
    assert fast.labels == [1.0, 0.0, 1.0, 0.0, 0.0] and len(fast.rejected) == 4
    full = {"length": 0.5, "height": None, "sex": "F", "flag": 7}
    fast = _check([_event(full), _event({**full, "height": 0.5}), _event({"length": 0.5}),
                   _event({}), _event({k: None for k in full})], strict=True)
    assert fast.index == [0, 1, 4] and "absent" in fast.rejected[0][1].detail
    fmt = EventFormat(key_field="user", features_field="features", label_field="label")
    values = [json.dumps({"user": "u1", "features": {"length": 0.5}, "label": 1}).encode(),
              json.dumps({"features": {"length": 0.5}, "label": 1}).encode(),
              json.dumps({"user": None, "features": {}, "label": 1}).encode(),
              json.dumps({"user": "u1", "x": {}, "y": 1}).encode()]
    fast = _check(values, [None] * 4, event_format=fmt)
    assert fast.keys == ["u1"] and [why.reason for _, why in fast.rejected] == [
        "missing_key", "missing_key", "schema"]



@pytest.mark.parametrize("labels", [[["pos"]], [[]], [["neg", "pos"]] * 2,
                                    [["pos"], "pos", {"y": 1}]])
def test_labels_that_are_lists_are_refused_one_by_one_in_a_batch(labels) -> None:
    """A label-set label that is itself a list is a wrong label, message by message. When
    every label of a batch was a list of one length, numpy made the batch's labels a 2-D
    array: ``["pos"]`` trained as "pos" without a word, and ``[]`` or two-element lists
    raised inside the trainer's loop, which stopped the stream on every restart."""
    def parser() -> EventParser:
        schema = PublicSchema(features={"age": (0.0, 100.0)}, labels=["neg", "pos"])
        return EventParser(RecordValidator(schema, "classification"))

    values = [json.dumps({"x": {"age": 3}, "y": y}).encode() for y in labels]
    keys = [f"k{i}".encode() for i in range(len(values))]
    fast, slow = parser().parse_batch(values, keys), parser().parse_each(values, keys)
    _identical(fast, slow)
    expected = [i for i, y in enumerate(labels) if not isinstance(y, str)]
    assert [i for i, why in fast.rejected if why.reason == "label"] == expected
    assert fast.index == [i for i in range(len(labels)) if i not in expected]

def test_formats_without_a_typed_shape_take_the_reference_path() -> None:
    for fmt in (EventFormat.model_construct(features_field="d", label_field="d"),
                EventFormat.model_construct(key_field="x"),
                EventFormat.model_construct(key_field="")):  # EventFormat refuses them
        batch, _ = _twins(event_format=fmt)
        assert batch._decoder is None
        _check([json.dumps({"x": {}, "y": 1, "": "u"}).encode(), b'{"d": {}}', *_GOOD],
               event_format=fmt)


def test_only_numeric_or_only_categorical_features() -> None:
    for features in ({"a": (0, 1)}, {"a": (0, 1), "b": (0, 2)}, {"c": ["u", "v"]}):
        _check([json.dumps({"x": {name: v}, "y": 3}).encode()
                for name in features for v in (0.5, -3, "u", None, 2, True)])


# ------------------------------------------------------------------ any document at all

_NAMES = ["length", "height", "sex", "flag", "colour", "x", "y", "key", "user", ""]
_TOKENS = [b"NaN", b"Infinity", b"-Infinity", b"-0", b"-0.0", b"1e400", b"-1e-400",
           b"1" + b"0" * 309, b"9007199254740993", b"18446744073709551616", b"01", b"1.",
           b"true", b"false", b"null", b'"F"', b'"I"', b'"\\u004d"', b'"\xff"', b"7", b"0",
           b"[]", b"{}"]
_SPACE = st.sampled_from([b"", b"", b" ", b"\n", b"\t\r"])


def _json_of(values: st.SearchStrategy) -> st.SearchStrategy[bytes]:
    return values.map(lambda v: json.dumps(v).encode())


#: Mostly what each part takes, sometimes anything.
_NUMBER = _json_of(st.one_of(st.floats(-2, 2), st.integers(-2, 2), st.none(),
                             st.floats(allow_nan=False, allow_infinity=False),
                             st.integers(-(2**70), 2**70)))
_CATEGORY = _json_of(st.one_of(st.sampled_from(["F", "I", "M", "a", "", "?", "Zoe\u0308"]),
                               st.integers(-2, 8), st.booleans(), st.none(),
                               st.integers(-(2**70), 2**70), st.text(max_size=3)))
_LABEL = _json_of(st.one_of(st.floats(-2, 32), st.integers(-2, 32), st.booleans(),
                            st.sampled_from([0, 1, 0.0, 1.0, -0.0]), st.none(),
                            st.floats(allow_nan=False, allow_infinity=False), st.text(max_size=2)))
_KEY = _json_of(st.one_of(st.text(max_size=4), st.integers(), st.booleans(), st.none(),
                          st.just("k" * 257)))
_ANY = st.one_of(_NUMBER, _CATEGORY, _KEY, st.sampled_from(_TOKENS))
_VALUE = st.recursive(_ANY, lambda inner: st.one_of(
    st.lists(inner, max_size=2).map(lambda vs: b"[" + b",".join(vs) + b"]"),
    st.lists(st.tuples(st.sampled_from(_NAMES), inner), max_size=2).map(
        lambda pairs: b"{" + b",".join(json.dumps(n).encode() + b":" + v
                                      for n, v in pairs) + b"}")), max_leaves=4)


def _sometimes(usual: st.SearchStrategy[bytes]) -> st.SearchStrategy[bytes]:
    return st.one_of(usual, usual, usual, usual, usual, usual, usual, _VALUE)


_PARTS = {"length": _sometimes(_NUMBER), "height": _sometimes(_NUMBER),
          "sex": _sometimes(_CATEGORY), "flag": _sometimes(_CATEGORY), "colour": _VALUE,
          "y": _sometimes(_LABEL), "user": _sometimes(_KEY), "z": _VALUE}


@st.composite
def _object(draw, usual: list[str], rare: list[str], strict: bool = False) -> bytes:
    """A JSON object of mostly the ``usual`` fields (all of them if ``strict``), sometimes
    the ``rare`` ones, some repeated, with JSON whitespace around its parts."""
    if strict and draw(st.integers(0, 3)):
        fields = [*usual, *draw(st.lists(st.sampled_from(usual + rare), max_size=1))]
    else:
        fields = draw(st.lists(st.sampled_from(usual * 8 + rare), max_size=len(usual) + 2))
    space = draw(_SPACE)
    return b"{" + b",".join(space + json.dumps(n).encode() + b":" + space + draw(
        _PARTS[n] if n != "x" else _object(["length", "height", "sex", "flag"], ["colour"],
                                           strict)) for n in fields) + space + b"}"


@st.composite
def _document(draw, payload_key: bool = False, strict: bool = False) -> bytes:
    """Mostly nearly valid events, with every kind of damage."""
    usual = ["x", "y", "user"] if payload_key else ["x", "y"]
    doc = draw(_object(usual, ["z"] if payload_key else ["user", "z"], strict))
    if draw(st.integers(0, 3)) and not (b'"x":' in doc and b'"y":' in doc):
        doc = (b'{"x": {}, "y": 1.5, ' + doc[1:] if doc[1:-1].strip()
               else b'{"x": {}, "y": 1.5}')
    damage = draw(st.sampled_from(["none"] * 16 + ["cut", "prefix", "flip", "value"]))
    if damage == "cut":
        doc = doc[:draw(st.integers(0, len(doc)))]
    elif damage == "prefix":
        doc = draw(st.sampled_from([b"\xef\xbb\xbf", b"[", b" ", b"\x00", b"\x0c"])) + doc
    elif damage == "flip":
        i = draw(st.integers(0, len(doc) - 1))
        doc = doc[:i] + bytes([draw(st.integers(0, 255))]) + doc[i + 1:]
    elif damage == "value":
        doc = draw(_VALUE)
    return doc


_KEYS = st.one_of(st.just(b"k1"), st.none(), st.just(b""), st.just(b"\xff"),
                  st.text(max_size=3).map(str.encode), st.just(b"a" * 257))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(task=st.sampled_from(["regression", "classification"]), strict=st.booleans(),
       payload_key=st.booleans(), data=st.data())
def test_any_batch_of_documents_parses_as_one_message_at_a_time(
        task, strict, payload_key, data) -> None:
    events = data.draw(st.lists(st.tuples(_KEYS, _document(payload_key, strict)), max_size=12))
    fmt = EventFormat(key_field="user" if payload_key else None, max_bytes=400)
    _check([v for _, v in events], [k for k, _ in events], task=task, strict=strict,
           event_format=fmt)


@pytest.mark.parametrize("path", ["batch", "each"])
def test_an_event_refused_for_its_label_or_key_spends_no_empty_record_warning(path) -> None:
    """The one warning about a record learned without any feature value went to a dead
    letter (``{"x": {}, "y": 99}``, refused for its label), and a record that was learned
    empty later went unwarned. The label and the key are judged before the features; and
    the columnar batch path, which never gave the warning, gives it as ``parse`` does."""
    schema = PublicSchema(features={"age": (0.0, 100.0)}, labels=["neg", "pos"])
    parser = EventParser(RecordValidator(schema, "classification"))
    parse = parser.parse_batch if path == "batch" else parser.parse_each
    refused = [json.dumps({"x": {}, "y": 99}).encode(), json.dumps({"x": {}, "y": "pos"}).encode()]
    with warnings.catch_warnings():
        warnings.simplefilter("error", SchemaMismatchWarning)
        batch = parse(refused, [b"k1", None])  # a bad label; no key
    assert [why.reason for _, why in batch.rejected] == ["label", "missing_key"]
    with pytest.warns(SchemaMismatchWarning, match="a record learned has no value"):
        assert parse([json.dumps({"x": {}, "y": "pos"}).encode()], [b"k3"]).index == [0]
