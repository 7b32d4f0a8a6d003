"""``renyiboost serve`` (issue 16, item 7): the real command, a real broker, a real HTTP
client. The server answers 503 until a release arrives, then the model's own predictions
with the version it used; a newer release on the topic moves it on; bad rows get 422 with
the reason; and only public fields are served."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import uuid
import warnings

import numpy as np
import pytest
from confluent_kafka import Producer
from conftest import create_topic

from renyiboost import SGBDTClassifier, SGBDTRegressor
from renyiboost.exceptions import TestingOnlyWarning

httpx = pytest.importorskip("httpx")
pytest.importorskip("fastapi")
warnings.simplefilter("ignore", TestingOnlyWarning)

FEATURES = {"a": (0.0, 1.0), "b": (-5.0, 5.0), "c": ["x", "y", "z"]}


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rows(n: int, seed: int) -> list[dict]:
    rng = np.random.default_rng(seed)
    return [{"a": float(a), "b": float(b), "c": "xyz"[c]} for a, b, c in
            zip(rng.uniform(0, 1, n), rng.uniform(-5, 5, n), rng.integers(0, 3, n),
                strict=True)]


def _publish(bootstrap: str, topic: str, model, name: str, versions: range) -> None:
    """What the trainer's publisher does: one message a version, the trees it adds."""
    producer = Producer({"bootstrap.servers": bootstrap})
    for version in versions:
        release = model.engine.release(name, after=version - 1, upto=version)
        producer.produce(topic, key=name.encode(), value=release.model_dump_json().encode())
    assert producer.flush(30) == 0


def _wait(client, path: str, version: int, timeout: float = 60.0) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            answer = client.get(path)
            if answer.status_code == 200 and answer.json()["version"] >= version:
                return answer.json()
        except httpx.TransportError:
            pass
        time.sleep(0.2)
    raise TimeoutError(f"the server did not reach version {version}")


@pytest.fixture(params=[True, False], ids=["topic-exists", "topic-later"])
def server(kafka_bootstrap, tmp_path, request):
    """Start ``renyiboost serve`` on a fresh topic; yields (topic, client)."""
    topic = f"serve-{uuid.uuid4().hex[:8]}.models"
    if request.param:  # the trainer made the topic already; else it appears after the server
        create_topic(kafka_bootstrap, topic)
    port = _free_port()
    log = (tmp_path / "serve.log").open("w")  # a file: a full pipe would block the server
    process = subprocess.Popen(
        [sys.executable, "-m", "renyiboost", "serve", "--bootstrap", kafka_bootstrap,
         "--model-topic", topic, "--model-name", "m", "--port", str(port)],
        env={**os.environ, "PYTHONWARNINGS": "ignore"}, stderr=log, text=True)
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=10.0)
    try:
        deadline = time.monotonic() + 60
        while True:  # up, but waiting for a model
            try:
                if client.get("/health").status_code == 503:
                    break
            except httpx.TransportError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("serve did not start: "
                                       + (tmp_path / "serve.log").read_text())
                time.sleep(0.2)
        yield topic, client
    finally:
        client.close()
        process.terminate()
        process.wait(10)
        log.close()
        print((tmp_path / "serve.log").read_text()[-3000:])  # shown when a test fails


def test_serve_follows_the_topic_and_answers_with_the_models_predictions(
        server, kafka_bootstrap) -> None:
    topic, client = server
    rows = _rows(400, seed=1)
    model = SGBDTRegressor(FEATURES, target_bounds=(-1.0, 4.0), epsilon=1.0, seed=2,
                           rounds=10, depth=3, train_every=50, warmup=50)
    assert client.post("/predict", json={"rows": rows[:2]}).status_code == 503
    assert client.get("/release").status_code == 503
    for i, x in enumerate(rows[:200]):
        model.learn_one(x, float(np.clip(2 * x["a"] + (x["c"] == "y"), -1, 4)), key=i)
    first = model.engine.release_version
    # another model's releases: the server waited in silence; now /health names them
    _publish(kafka_bootstrap, topic, model, "other", range(1, 2))
    deadline = time.monotonic() + 60
    while "other" not in client.get("/health").json().get("reason", ""):
        assert time.monotonic() < deadline, client.get("/health").json()
        time.sleep(0.2)
    assert client.get("/health").status_code == 503
    _publish(kafka_bootstrap, topic, model, "m", range(1, first + 1))
    _wait(client, "/health", first)
    assert "reason" not in client.get("/health").json()
    probe = rows[:50]
    answer = client.post("/predict", json={"rows": probe}).json()
    assert answer["version"] == first and answer["model"] == "m"
    np.testing.assert_allclose(answer["predictions"], [model.predict_one(x) for x in probe],
                               rtol=1e-12)
    # more training, more releases: the server moves on and says so
    for i, x in enumerate(rows[200:], start=200):
        model.learn_one(x, float(np.clip(2 * x["a"] + (x["c"] == "y"), -1, 4)), key=i)
    second = model.engine.release_version
    assert second > first
    _publish(kafka_bootstrap, topic, model, "m", range(first + 1, second + 1))
    _wait(client, "/health", second)
    answer = client.post("/predict", json={"rows": probe}).json()
    assert answer["version"] == second
    np.testing.assert_allclose(answer["predictions"], [model.predict_one(x) for x in probe],
                               rtol=1e-12)
    described = client.get("/model").json()
    assert set(described) == {"model", "version", "store_id", "task", "public_schema",
                              "guarantee"}
    assert described["guarantee"] == model.privacy_guarantee().model_dump(mode="json")
    # the whole model of the served version, rebuilt from the topic alone: the export
    assert client.get("/release").json() == model.release("m").model_dump(mode="json")
    # bad rows: the reason and the row, nothing predicted
    bad = client.post("/predict", json={"rows": [probe[0], {"a": 0.5, "d": 1.0}]})
    assert bad.status_code == 422
    assert bad.json()["detail"]["reason"] == "schema" and "row 1" in bad.json()["detail"]["detail"]
    assert client.post("/predict", json={"rows": [{"a": "high"}]}).status_code == 422
    # a category of another type than the schema's was answered as "other", with a warning
    # in the server's log only (review V #2): refused now; an unknown string is "other"
    odd = client.post("/predict", json={"rows": [{"a": 0.5, "c": 1}]})
    assert odd.status_code == 422 and "type none of its categories" in odd.text
    assert client.post("/predict", json={"rows": [{"a": 0.5, "c": "w"}]}).status_code == 200
    assert client.post("/predict", json={"rows": []}).status_code == 422
    # a key beside rows is refused, not ignored; the API description is served (it was a
    # 500: /health's return type did not resolve)
    assert client.post("/predict", json={"rows": probe[:1], "row": {}}).status_code == 422
    api = client.get("/openapi.json")
    assert api.status_code == 200 and "/predict" in api.json()["paths"]


def test_serve_gives_labels_and_probabilities_of_a_multiclass_model(server,
                                                                    kafka_bootstrap) -> None:
    topic, client = server
    rows = _rows(300, seed=3)
    model = SGBDTClassifier(FEATURES, labels=["p", "q", "r"], epsilon=1.0, seed=4, rounds=8,
                            depth=2, train_every=50, warmup=50)
    for i, x in enumerate(rows):
        model.learn_one(x, "pqr"[int(x["a"] * 3)], key=i)
    version = model.engine.release_version
    _publish(kafka_bootstrap, topic, model, "m", range(1, version + 1))
    _wait(client, "/health", version)
    answer = client.post("/predict", json={"rows": rows[:20]}).json()
    assert answer["predictions"] == [model.predict_one(x) for x in rows[:20]]
    for served, x in zip(answer["probabilities"], rows[:20], strict=True):
        expected = model.predict_proba_one(x)
        assert served == pytest.approx({k: v for k, v in expected.items()}, rel=1e-12)


def test_a_follower_says_why_it_cannot_read_the_topic(caplog) -> None:
    """With no broker at its address, ``serve`` answered "waiting" forever, with no word of
    why; it now says the topic cannot be read (and ``/health`` gives that), and leaves the
    client's error text, which can name internal addresses, to the log."""
    from renyiboost.connectors.kafka import ModelFollower

    follower = ModelFollower(f"127.0.0.1:{_free_port()}", "models", "m",
                             extra={"reconnect.backoff.max.ms": "200"})
    try:
        deadline = time.monotonic() + 30
        while follower.waiting_reason() is None and time.monotonic() < deadline:
            follower.poll(0.2)
        reason = follower.waiting_reason()
        assert reason is not None and "cannot be read yet" in reason, reason
        # the client's text (here the address it could not reach) stays in the log
        assert follower.client_error[0] not in reason and "127.0.0.1" not in reason
        assert f"the model topic 'models' cannot be read: {follower.client_error[0]}" \
            in caplog.text
        follower.client_error = (follower.client_error[0], time.monotonic() - 60)
        assert follower.waiting_reason() is None  # an old error explains nothing now
    finally:
        follower.consumer.close()


def test_serve_on_a_port_in_use_is_one_error_line() -> None:
    """uvicorn exited with its own code 3 when it could not bind; ``serve`` now says so in
    one line and exits 1, as every renyiboost error does."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    try:
        done = subprocess.run(
            [sys.executable, "-m", "renyiboost", "serve", "--bootstrap", "127.0.0.1:1",
             "--model-topic", "t", "--port", str(taken.getsockname()[1])], check=False,
            capture_output=True, text=True, timeout=60, env={**os.environ,
                                                             "PYTHONWARNINGS": "ignore"})
    finally:
        taken.close()
    assert done.returncode == 1
    assert "renyiboost: error: cannot serve on http://127.0.0.1:" in done.stderr


def test_a_body_too_large_is_refused_before_it_is_parsed_and_refusals_echo_nothing() -> None:
    """2,000,000 empty rows (6 MB) were parsed whole before the 10,000-row bound refused
    them (2.9 s, 300 MB), and the 422 echoed the 6 MB back. A body over MAX_BODY_BYTES is
    now refused with 413, by its Content-Length or while a chunked body arrives, and a
    refusal names where and why without the input."""
    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import (
        ERRORS_SHOWN,
        MAX_BODY_BYTES,
        MAX_ROWS,
        create_app,
    )

    class Idle:  # no model: what /predict would answer is not reached by these requests
        def start(self) -> None: ...
        def stop(self) -> None: ...

    client = TestClient(create_app(Idle()))  # type: ignore[arg-type]
    huge = b'{"rows": [' + b"{}," * (MAX_BODY_BYTES // 3) + b"{}]}"
    answer = client.post("/predict", content=huge,
                         headers={"content-type": "application/json"})
    assert answer.status_code == 413 and "over 8,388,608 bytes" in answer.json()["detail"]

    def chunks():
        yield b'{"rows": ['
        for _ in range(MAX_BODY_BYTES // 30_000 + 1):
            yield b"{}," * 10_000
        yield b"{}]}"

    answer = client.post("/predict", content=chunks(),
                         headers={"content-type": "application/json"})
    assert answer.status_code == 413
    many = client.post("/predict", json={"rows": [{}] * (MAX_ROWS + 1)})
    assert many.status_code == 422 and len(many.content) < 1_000
    assert "at most 10000 items" in many.text and "\"input\"" not in many.text
    name = "k" * 1_000_000  # a field's name came back whole (review B: 1,000,096 bytes)
    quoted = json.dumps(name)
    for body in (f'{{"rows": [], {quoted}: 1}}', f'{{"rows": [{{{quoted}: 1, {quoted}: 2}}]}}'):
        answer = client.post("/predict", content=body.encode(),
                             headers={"content-type": "application/json"})
        assert answer.status_code == 422 and len(answer.content) < 1_000, len(answer.content)
        assert "k" * 100 + "…" in str(answer.json()["detail"])
    # one error a bad row: 10,000 of them in a 20 kB request came back as 900 kB (review P
    # #8); now the first ERRORS_SHOWN and their total
    bad = client.post("/predict", json={"rows": [1] * MAX_ROWS})
    assert bad.status_code == 422 and len(bad.json()["detail"]) == ERRORS_SHOWN
    assert bad.json()["errors"] == MAX_ROWS and len(bad.content) < 5_000
    # a JSON body sent as a form (curl -d), as text or without a type was told "Input should
    # be a valid dictionary" (review P #9)
    for media in ("application/x-www-form-urlencoded", "text/plain", None):
        answer = client.post("/predict", content=b'{"rows": [{"a": 0.5}]}',
                             headers={} if media is None else {"content-type": media})
        assert answer.status_code == 415, (media, answer.text)
        assert "Content-Type: application/json" in answer.json()["detail"]


def test_a_field_named_twice_in_a_predict_body_is_refused_not_overwritten() -> None:
    """``{"a": "bad", "a": 0.5}`` was answered 200 from the last value (JSON parsers keep
    it), as an event with a repeated field was learned: now 422, naming the field, before
    anything is predicted; a colon inside a string is no repeat."""
    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import NotServing, create_app

    class Answers:
        calls = 0

        def start(self) -> None: ...
        def stop(self) -> None: ...

        def predict(self, rows):  # reached only by bodies without a repeated field
            Answers.calls += 1
            raise NotServing("no model version received yet")

    client = TestClient(create_app(Answers()))  # type: ignore[arg-type]
    for body, field in ((b'{"rows": [{"a": "bad", "a": 0.5}]}', "a"),
                        (b'{"rows": [{"a": 0.5}], "rows": [{"a": 0.7}]}', "rows")):
        answer = client.post("/predict", content=body,
                             headers={"content-type": "application/json"})
        assert answer.status_code == 422, answer.text
        assert answer.json()["detail"] == {
            "reason": "schema", "detail": f"the field {field!r} appears twice in one object"}
    for encoding in ("utf-16", "utf-16-le", "utf-32"):  # JSON parsers read them; the check not
        answer = client.post("/predict", headers={"content-type": "application/json"},
                             content='{"rows": [{"a": "bad", "a": 0.5}]}'.encode(encoding))
        assert answer.status_code == 422, (encoding, answer.text)
        assert answer.json()["detail"]["detail"] == "the request body must be JSON in UTF-8"
    assert Answers.calls == 0
    fine = client.post("/predict", content=b'{"rows": [{"c": "x:y", "a": 0.5}]}',
                       headers={"content-type": "application/json"})
    assert fine.status_code == 503 and Answers.calls == 1


def test_an_internal_lookup_error_is_a_server_error_not_a_model_not_yet_there() -> None:
    """``except LookupError`` also caught an internal ``KeyError`` or ``IndexError`` and
    answered 503 with its text, telling the client to wait for a model that was there
    (review V #3): only :class:`NotServing` is a 503 now."""
    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import NotServing, create_app

    class Broken:
        def start(self) -> None: ...
        def stop(self) -> None: ...

        def predict(self, rows):
            raise KeyError("an internal table")

        def describe(self):
            raise NotServing("no model version received yet")

    client = TestClient(create_app(Broken()), raise_server_exceptions=False)  # type: ignore[arg-type]
    answer = client.post("/predict", json={"rows": [{"a": 0.5}]})
    assert answer.status_code == 500 and "internal table" not in answer.text
    model = client.get("/model")
    assert model.status_code == 503 and model.json()["detail"] == "no model version received yet"


@pytest.mark.parametrize("seeded", [True, False])
def test_health_says_when_the_served_model_is_seeded_for_testing(seeded) -> None:
    """A seeded model's noise came from a fixed seed: /health said only "ready" (the flag
    sat inside /model's guarantee); it now says so, and says nothing for a production one.
    While the Kafka client reports errors it says "degraded" (still 200: it answers)."""
    import threading
    from types import SimpleNamespace

    from fastapi.testclient import TestClient

    from renyiboost.connectors.serving import create_app

    class Ready:
        lock = threading.Lock()
        poll_failing = False
        follower = SimpleNamespace(version=3, stalled=None, waiting_reason=lambda: None,
                                   unreadable=lambda: False,
                                   guarantee=SimpleNamespace(seeded_for_testing=seeded))

        def start(self) -> None: ...
        def stop(self) -> None: ...
        def refusal(self) -> None:
            return None

    answer = TestClient(create_app(Ready())).get("/health")  # type: ignore[arg-type]
    assert answer.status_code == 200
    assert answer.json() == {"status": "ready", "version": 3} | (
        {"seeded_for_testing": True} if seeded else {})
    # the client reports errors: still answering, but from what may no longer be the newest
    Ready.follower.unreadable = lambda: True
    answer = TestClient(create_app(Ready())).get("/health")  # type: ignore[arg-type]
    assert answer.status_code == 200 and answer.json()["status"] == "degraded"
    assert "version 3, the newest this server received" in answer.json()["reason"]


def test_a_waiting_follower_names_only_releases_of_other_models() -> None:
    """A follower that has nothing yet names the other models on its topic in the public
    ``/health``; a model topic pointed at an event or dead-letter topic named every message
    key there, person ids (review K2 #5). Only a release whose key is its own model's name
    is named now."""
    from renyiboost.connectors.kafka import ModelFollower

    class Message:
        def __init__(self, key: bytes, value: bytes) -> None:
            self._key, self._value = key, value

        def key(self) -> bytes:
            return self._key

        def value(self) -> bytes:
            return self._value

        def error(self) -> None:
            return None

    model = SGBDTRegressor(FEATURES, target_bounds=(0.0, 1.0), epsilon=1.0, seed=1,
                           train_every=50, warmup=50)
    for i, x in enumerate(_rows(120, seed=5)):
        model.learn_one(x, x["a"], key=i)
    release = model.engine.release().model_copy(update={"model": "other"})
    follower = ModelFollower.without_consumer("mine")
    for key, value in ((b"alice@example.com", b'{"x": {"a": 0.5}, "y": 1}'),
                       (b"bob@example.com", release.model_dump_json().encode()),
                       (b"other", release.model_dump_json().encode())):
        assert follower._take(Message(key, value)) == 0
    reason = follower.waiting_reason()
    assert reason is not None and "'other'" in reason and "example.com" not in reason
