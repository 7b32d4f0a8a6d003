"""``renyiboost serve``: an HTTP JSON predict endpoint that follows the model topic (issue 16,
item 7).

A :class:`~renyiboost.connectors.kafka.ModelFollower` reads the public releases from the
model topic in a background thread; a FastAPI app (an ASGI app, served by uvicorn) answers
from the newest version it has applied. Everything it serves is public: predictions of the
released model, the version and store that produced them, the schema and the guarantee.
No operator telemetry is reachable from here (the follower has none: it reads the public
topic only).

Endpoints:

* ``POST /predict`` ``{"rows": [{feature: value, ...}, ...]}`` → ``{"model", "version",
  "store_id", "predictions": [...]}`` and, for a classifier, ``"probabilities"`` (one
  ``{label: p}`` a row). Rows are validated against the public schema exactly as a
  training record is (unknown features, non-numbers, infinite numbers are refused; so is
  a categorical value of a type none of the feature's categories has, ``1`` for ``"1"``,
  which a training record's "other" branch takes with a warning; ``null``, a left-out
  feature and the non-standard ``NaN`` literal are missing values, as in training, so ``{}``
  is answered from the model's missing-value branches): a bad row answers 422
  with its index, reason and detail, and nothing is predicted. 503 until a
  first release has arrived, and 503 with the reason while the model is not served: the
  model topic lacks a version after the follower's (:attr:`ModelFollower.stalled
  <renyiboost.connectors.kafka.ModelFollower.stalled>`: answering from the older version
  would hide that the model moved on), or the public label set has two labels with the same
  ``str()`` (``1`` and ``"1"``: their probabilities would share one JSON key and one class
  would vanish from the answer).
* ``GET /model`` → the public description of the served version (schema, task, guarantee).
* ``GET /health`` → 200 ``{"status": "ready", "version": v}``, or ``{"status": "degraded",
  "version": v, "reason": ...}`` while the Kafka client reports errors or the last poll of the
  model topic failed (answering from the
  newest version received, which may no longer be the newest released); 503
  ``{"status": "waiting", "version": 0}`` before the first release, or ``{"status": "not
  serving", "version": v, "reason": ...}``. ``/model`` and ``/release`` answer 503 with the
  reason while the follower is stalled, as ``/predict`` does. The Kafka client's error text
  (cluster addresses, authentication failures) is logged, never answered.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from collections.abc import Mapping, Sequence
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from renyiboost.exceptions import InvalidRecord, RenyiboostError

log = logging.getLogger("renyiboost.serve")

#: Rows one request may hold (a bound on the work a single request can ask for).
MAX_ROWS = 10_000
#: Bytes one request body may hold, checked as it arrives (413 beyond): the row bound is
#: checked only once the body is parsed, and 2,000,000 empty rows (6 MB) took 2.9 s and
#: 300 MB to refuse. 8 MiB holds 10,000 rows of about 800 bytes; send wider rows in
#: smaller batches.
MAX_BODY_BYTES = 8 * 1024 * 1024
#: Characters of a client's own text (a field's name) a refusal repeats: enough to find
#: the field, and a 1 MB name is not answered with 1 MB.
ECHOED_CHARS = 100
#: Validation errors a refused request is answered with (their total besides).
ERRORS_SHOWN = 20


def _short(part: Any) -> Any:
    """``part`` of a refusal's location, a string cut to :data:`ECHOED_CHARS` (``…`` marks
    the cut); indexes and short names as they are."""
    if isinstance(part, str) and len(part) > ECHOED_CHARS:
        return part[:ECHOED_CHARS] + "…"
    return part


class BodyLimit:
    """ASGI middleware refusing a request body over ``limit`` bytes with 413: at once by
    its ``Content-Length``, or while a chunked body arrives, before it is parsed."""

    def __init__(self, app: Any, limit: int = MAX_BODY_BYTES) -> None:
        self.app, self.limit = app, limit

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        from fastapi import HTTPException

        from_header = dict(scope.get("headers") or []).get(b"content-length")
        if from_header is not None and (not from_header.isdigit()
                                        or int(from_header) > self.limit):
            await self._refuse(send)
            return
        received = 0

        async def limited() -> dict[str, Any]:
            nonlocal received
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > self.limit:  # FastAPI answers an HTTPException while parsing
                    raise HTTPException(status_code=413, detail=self._detail())
            return message

        await self.app(scope, limited, send)

    def _detail(self) -> str:
        return (f"the request body is over {self.limit:,} bytes; send at most {MAX_ROWS:,} "
                "rows, in smaller batches if they are wide")

    async def _refuse(self, send: Any) -> None:
        body = json.dumps({"detail": self._detail()}).encode()
        await send({"type": "http.response.start", "status": 413,
                    "headers": [(b"content-type", b"application/json"),
                                (b"content-length", str(len(body)).encode())]})
        await send({"type": "http.response.body", "body": body})


class PredictRequest(BaseModel):
    """The body of ``POST /predict`` (a key other than ``rows`` is refused, not ignored)."""

    model_config = ConfigDict(extra="forbid")
    rows: list[dict[str, Any]] = Field(min_length=1, max_length=MAX_ROWS)


class PredictResponse(BaseModel):
    """Predictions of one model version (public: the release's predictions and identity)."""

    model: str
    version: int
    store_id: str | None
    predictions: list[Any]
    probabilities: list[dict[str, float]] | None = None


def probability_keys(labels: Sequence[Any]) -> list[str]:
    """The JSON keys of a classifier's probabilities, ``str(label)`` for each public label
    (``{"False": p, "True": p}`` without a label set); raises ``ValueError`` for a label set
    in which two labels have the same ``str()``, e.g. ``[1, "1"]``: one key would hold two
    classes' probabilities and the other class would silently vanish from the answer."""
    keys = [str(label) for label in labels]
    shared = sorted({key for key in keys if keys.count(key) > 1})
    if shared:
        raise ValueError(
            f"the public label set {list(labels)!r} has labels that read the same as JSON "
            f"keys ({', '.join(map(repr, shared))}), so /predict cannot answer their class "
            "probabilities apart; serve a model whose labels differ as strings")
    return keys


class NotServing(LookupError):
    """The served model cannot answer now (503 with this reason): no version yet, the
    follower stalled, a version without trees its tree cap dropped, or labels that collide
    as JSON keys. Its own class, so that an internal ``KeyError`` or ``IndexError`` (also
    ``LookupError`` too) is a server error (500, logged), not a 503 that tells the client to
    wait for a model that is there."""


class FollowerService:
    """A model follower polled in a background thread, and predictions under one lock (a
    release is applied whole between two predictions, never during one)."""

    def __init__(self, follower: Any, poll_interval: float = 0.2) -> None:
        self.follower = follower
        self.poll_interval = poll_interval
        self.lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        #: Whether the last poll of the model topic raised (logged with its traceback): a
        #: follower whose every poll failed once kept answering "ready" from a version that
        #: could no longer move on (review P #5).
        self.poll_failing = False
        #: The last exported release, by (store, version): building one holds the lock
        #: every prediction needs (0.4 s at 5,000 trees), and any client may ask again and
        #: again; a version never changes (review P #7).
        self._exported: tuple[tuple[str | None, int], dict[str, Any]] | None = None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._follow, name="model-follower",
                                        daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self.follower.consumer.close()

    def _follow(self) -> None:
        refused: str | None = None
        while not self._stop.is_set():
            refused = self._poll_once(refused)
            self._stop.wait(self.poll_interval)

    def _poll_once(self, refused: str | None) -> str | None:
        """Apply what the topic holds now, a message at a time under the lock (predictions
        answer between two versions, never during one), and log a change of whether the
        version is served; returns why it is not (``None``: it is)."""
        try:
            applied = self.follower.poll(0.0, lock=self.lock)
            with self.lock:
                why_not = self.refusal() if self.follower.version else None
        except Exception:  # keep serving the last good version; say why
            log.exception("reading the model topic failed; still serving version %d",
                          self.follower.version)
            self.poll_failing = True
            return refused
        self.poll_failing = False
        if why_not != refused and why_not is not None:
            log.error("not serving model %r version %d: %s", self.follower.model_name,
                      self.follower.version, why_not)
        elif applied and why_not is None:
            log.info("serving model %r version %d", self.follower.model_name,
                     self.follower.version)
        return why_not

    def refusal(self) -> str | None:
        """Why the follower's current version is not served (``None``: it is). Reads the
        follower's attributes only, without the lock: call it under the lock for an answer
        consistent with a prediction."""
        follower = self.follower
        if (incomplete := self._incomplete()) is not None:
            return incomplete
        if follower.ensemble is None or follower.validator is None or not follower.version:
            return "no model version received yet"
        if follower.task == "classification":
            try:
                probability_keys(follower.validator.schema.classes)
            except ValueError as why:
                return str(why)
        return None

    def predict(self, rows: list[dict[str, Any]]) -> PredictResponse:
        """Validated rows → predictions of the current version (:class:`NotServing` before
        the first release; :class:`InvalidRecord` naming the first bad row)."""
        with self.lock:
            follower = self.follower
            refused = self.refusal()
            if refused is not None:
                raise NotServing(refused)
            encoded = []
            for i, row in enumerate(rows):
                try:
                    encoded.append(follower.validator.features(row, refuse_other_types=True))
                except InvalidRecord as why:
                    raise InvalidRecord(why.reason, f"row {i}: {why.detail}") from None
            margin = follower.ensemble.predict_margin(np.vstack(encoded))
            schema = follower.validator.schema
            response = {"model": follower.model_name, "version": follower.version,
                        "store_id": follower.store_id}
            predictions, proba = follower.answers(margin)
        if proba is None:
            return PredictResponse(**response, predictions=predictions)
        keys = probability_keys(schema.classes)
        return PredictResponse(
            **response, predictions=predictions,
            probabilities=[dict(zip(keys, row, strict=True)) for row in proba.tolist()])

    def release(self) -> dict[str, Any]:
        """The served version's whole model as a public release (JSON-ready: trees, schema,
        parameters, guarantee), for an export from the server alone (``SGBDT.from_json``,
        ``to_onnx``)."""
        with self.lock:
            self._check_complete()
            which = (self.follower.store_id, self.follower.version)
            if self._exported is None or self._exported[0] != which:
                self._exported = (which, self.follower.release().model_dump(mode="json"))
            return self._exported[1]

    def _check_complete(self) -> None:
        """:class:`NotServing` before the first version, or while the follower's version
        is not a model the trainer had (:meth:`_incomplete`): it is neither predicted from,
        described nor exported."""
        if (self.follower.ensemble is None or self.follower.validator is None
                or not self.follower.version):
            raise NotServing("no model version received yet")
        if (incomplete := self._incomplete()) is not None:
            raise NotServing(incomplete)

    def _incomplete(self) -> str | None:
        """Why the follower's version is not a model the trainer had: the topic lacks the
        next version (stalled), or the version arrived without trees a tree cap dropped."""
        follower = self.follower
        if follower.stalled is not None:
            return follower.stalled
        if lacking := follower.lacking_trees():
            return (f"version {follower.version} arrived without {lacking} of its trees (its "
                    "publisher lagged behind the trainer's max_trees, which dropped them); "
                    "answers resume when newer versions bring them")
        return None

    def describe(self) -> dict[str, Any]:
        """The public description of the served version."""
        with self.lock:
            follower = self.follower
            self._check_complete()
            return {"model": follower.model_name, "version": follower.version,
                    "store_id": follower.store_id, "task": follower.task,
                    "public_schema": follower.validator.schema.model_dump(mode="json"),
                    "guarantee": follower.guarantee.model_dump(mode="json")}


def create_app(service: FollowerService) -> Any:
    """The ASGI app over ``service`` (started and stopped with the app's lifespan)."""
    from fastapi import Depends, FastAPI, HTTPException, Request
    from fastapi.encoders import jsonable_encoder
    from fastapi.exceptions import RequestValidationError
    from fastapi.responses import JSONResponse

    from renyiboost.connectors.events import repeated_field
    from renyiboost.connectors.kafka import CLIENT_ERROR_LOGGED

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> Any:
        service.start()
        yield
        service.stop()

    app = FastAPI(title="renyiboost", description="DP tree model served from its model "
                  "topic (public releases only)", lifespan=lifespan)
    app.add_middleware(BodyLimit)

    @app.exception_handler(RequestValidationError)
    async def refused(request: Any, error: RequestValidationError) -> JSONResponse:
        """422 with where and why, without echoing the input back (a refused body of
        6 MB was answered with 6 MB; an unknown field's name of 1 MB came back in ``loc``
        until names were cut to :data:`ECHOED_CHARS`: review B), for the first
        :data:`ERRORS_SHOWN` errors and their total (10,000 bad rows of a 20 kB request
        were answered with 900 kB: review P #8). A body not sent as JSON gets 415 and says
        so: curl's ``-d`` sends a form, which was answered "Input should be a valid
        dictionary" (review P #9)."""
        media = request.headers.get("content-type", "").split(";")[0].strip().lower()
        errors = error.errors()
        unread = any(tuple(e.get("loc", ())) == ("body",) for e in errors)  # not a JSON body
        if unread and media != "application/json" and not media.endswith("+json"):
            return JSONResponse(status_code=415, content={"detail": (
                "the request body must be sent as JSON (Content-Type: application/json), "
                f"got {_short(media or 'no content type')!r}")})
        content: dict[str, Any] = {"detail": jsonable_encoder(
            [{k: [_short(part) for part in v] if k == "loc" else v
              for k, v in e.items() if k != "input"} for e in errors[:ERRORS_SHOWN]])}
        if len(errors) > ERRORS_SHOWN:
            content["errors"] = len(errors)
        return JSONResponse(status_code=422, content=content)

    async def body_of(raw: Any) -> bytes:
        return await raw.body()  # the same bytes FastAPI parses (Starlette keeps them)

    # FastAPI reads the annotation's object: under ``from __future__ import annotations`` the
    # name of a class imported in this function (FastAPI is an extra) would not resolve.
    body_of.__annotations__["raw"] = Request

    @app.post("/predict", response_model=PredictResponse, response_model_exclude_none=True)
    def predict(request: PredictRequest, body: bytes = Depends(body_of)) -> PredictResponse:
        if b"\0" in body:  # UTF-16 or UTF-32: json.loads reads them, the check below not
            raise HTTPException(status_code=422, detail={
                "reason": "schema", "detail": "the request body must be JSON in UTF-8"})
        fields = 1 + sum(map(len, request.rows))
        repeated = repeated_field(body, fields)
        if repeated is not None:  # the parser kept its last value: refused, not ignored
            raise HTTPException(status_code=422, detail={
                "reason": "schema", "detail": f"the field {_short(repeated)!r} appears twice "
                                              "in one object"})
        try:
            return service.predict(request.rows)
        except NotServing as why:
            raise HTTPException(status_code=503, detail=str(why)) from None
        except InvalidRecord as why:
            raise HTTPException(status_code=422, detail={
                "reason": why.reason, "detail": why.detail}) from None

    @app.get("/model")
    def model() -> dict[str, Any]:
        try:
            return service.describe()
        except NotServing as why:
            raise HTTPException(status_code=503, detail=str(why)) from None

    @app.get("/release", response_model=None)
    def release() -> JSONResponse:
        """The served version's whole model: the public release, trees included."""
        try:
            return JSONResponse(service.release())
        except NotServing as why:
            raise HTTPException(status_code=503, detail=str(why)) from None

    @app.get("/health", response_model=None)  # a JSONResponse: its status code varies
    def health() -> JSONResponse:
        with service.lock:
            version, refused = service.follower.version, service.refusal()
            waiting = service.follower.waiting_reason()
            unreadable = service.follower.unreadable()
            failing = service.poll_failing
        if refused is None:
            guarantee = service.follower.guarantee
            seeded = guarantee is not None and guarantee.seeded_for_testing
            # a seeded model protects no one: said where a health check looks, not only in
            # the guarantee that /model gives
            flags = {"seeded_for_testing": True} if seeded else {}
            if unreadable or failing:  # answering from what may not be the newest version
                why = CLIENT_ERROR_LOGGED if unreadable else "this server's log says why"
                return JSONResponse({"status": "degraded", "version": version, "reason": (
                    f"the model topic cannot be read now ({why}); answering from version "
                    f"{version}, the newest this server received")} | flags)
            return JSONResponse({"status": "ready", "version": version} | flags)
        if version == 0 and service.follower.stalled is None:
            return JSONResponse({"status": "waiting", "version": 0}
                                | ({} if waiting is None else {"reason": waiting}),
                                status_code=503)
        return JSONResponse({"status": "not serving", "version": version, "reason": refused},
                            status_code=503)

    return app


def run_serve(bootstrap: str, model_topic: str, model_name: str = "model",
              host: str = "127.0.0.1", port: int = 8000,
              client: Mapping[str, str] | None = None) -> int:
    """Follow ``model_topic`` and serve it over HTTP until interrupted (``client``: more
    librdkafka settings, e.g. a secured cluster's)."""
    try:
        import uvicorn
    except ImportError as missing:  # pragma: no cover - depends on the environment
        raise ImportError("serving needs the serve extra: pip install 'renyiboost[serve]'"
                          ) from missing
    from renyiboost.connectors.kafka import ModelFollower

    # A model topic the trainer creates after the server starts is found within seconds
    # (librdkafka's default metadata refresh is five minutes).
    follower = ModelFollower(bootstrap, model_topic, model_name,
                             extra={"topic.metadata.refresh.interval.ms": "2000",
                                    **(client or {})})
    service = FollowerService(follower)
    log.info("following %s on %s; serving on http://%s:%d", model_topic, bootstrap, host, port)
    started = time.monotonic()
    try:
        uvicorn.run(create_app(service), host=host, port=port, log_level="warning")
    except SystemExit as stopped:  # uvicorn exits (code 3) when it cannot bind
        if stopped.code in (0, None):
            raise
        raise RenyiboostError(f"cannot serve on http://{host}:{port} (is the port in use, or "
                              "the host not this machine's?); see the error above") from None
    log.info("stopped after %.0f s", time.monotonic() - started)
    return 0
