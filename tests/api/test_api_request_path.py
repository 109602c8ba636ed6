"""The request path's pure parts: every write authenticates before it reads its body,
bodies documented, the nesting scan, the failure limiter, the middlewares (body limit,
access line, metrics counted once), the answers written from the domain objects."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from fastapi import FastAPI, Request, Response
from fastapi.testclient import TestClient
from structlog.testing import capture_logs

from support.served_app import settings_for
from work_ledger.api import access_log, answers, body_limit, problems, wire
from work_ledger.api import metrics as api_metrics
from work_ledger.api.app import create_app
from work_ledger.api.collectors import LedgerMetrics
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.domain.model import (
    Attempt,
    Claim,
    Disposition,
    Outcome,
    Question,
    QuestionStatus,
    State,
    Unit,
)


@pytest.fixture(scope="module")
def app() -> Any:
    settings = settings_for(
        "postgresql://unused/unused", Path("/nonexistent"), secret="x" * 32, stall_seconds=None
    )
    return create_app(settings)


def test_every_write_refuses_an_anonymous_caller_before_reading_its_body(app: Any) -> None:
    """Each POST answers a request without a token 401, whatever its (unparsable) body:
    the body dependency runs after the caller's."""
    app.state.writes = None  # no lifespan here; an unkeyed request never reaches it
    client = TestClient(app)
    posts = [path for path, operations in app.openapi()["paths"].items() if "post" in operations]
    assert len(posts) >= 11
    for template in posts:
        path = template.format_map(_Filled())
        response = client.post(path, content=b'{"not json', headers={"Idempotency-Key": "k"})
        assert (response.status_code, response.json()["code"]) == (401, "unauthorized"), path


def test_operations_document_a_token_exactly_where_one_is_required(app: Any) -> None:
    """Each operation that refuses an anonymous caller (401) documents the bearer token and
    X-WL-Agent (its `openapi_extra`), and no other operation does."""
    app.state.writes = app.state.ledger = None  # no lifespan: nothing is reached past 401
    client = TestClient(app, raise_server_exceptions=False)
    for template, operations in app.openapi()["paths"].items():
        for method, operation in operations.items():
            response = client.request(method, template.format_map(_Filled()), content=b"{}")
            headers = [p["name"] for p in operation.get("parameters", []) if p["in"] == "header"]
            documented = "security" in operation and "X-WL-Agent" in headers
            assert (response.status_code == 401) == documented, f"{method} {template}"


class _Filled(dict[str, str]):
    def __missing__(self, key: str) -> str:
        return str(uuid.uuid4())


def test_every_post_body_is_documented(app: Any) -> None:
    """Each POST's requestBody names a schema present in components."""
    schema = app.openapi()
    for path, operations in schema["paths"].items():
        post = operations.get("post")
        if post is None:
            continue
        if path == "/otlp/v1/logs":
            # OpenTelemetry's message (protobuf or JSON), its records idempotent by identity.
            assert set(post["requestBody"]["content"]) == {
                "application/x-protobuf",
                "application/json",
            }
            continue
        ref = post["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert ref.rsplit("/", 1)[1] in schema["components"]["schemas"], path
        assert {"name": "Idempotency-Key"}.items() <= post["parameters"][-1].items(), path


@pytest.mark.parametrize(
    ("document", "path"),
    [
        (b'{"events":[{"detail":' + b'{"a":' * 300, ["events", 0, "detail", "a", "a", "a"]),
        (b'{"x":"{[\\"","y":[1,[2,' + b"[" * 300, ["y", 1, 1, 0, 0, 0]),
        (b"[" * 100_000, [0, 0, 0, 0, 0, 0]),
    ],
)
def test_deep_path_names_where_nesting_passes_the_limit(document: bytes, path: list[Any]) -> None:
    """Strings with brackets are skipped; keys and indexes are followed (first 6 shown)."""
    assert wire._deep_path(document, shown=6) == path


def test_free_form_depth_is_counted_without_recursion() -> None:
    """A 100,000-deep value is measured by the loop (stopping past the limit)."""
    deep: Any = {}
    for _ in range(100_000):
        deep = {"a": [deep]}
    assert wire._depth({"a": {"b": 1}}) == 2
    assert wire._depth(deep) == wire.MAX_FREE_DEPTH + 1


def test_failure_limiter_allows_a_burst_then_refills() -> None:
    """`burst` failures pass, the next waits about 1/per_second; other clients, and other
    token prefixes from the same client, unaffected."""
    limiter = FailureLimiter(burst=2, per_second=0.5)
    for _ in range(2):
        assert limiter.retry_after(("a", "0badc0de")) == 0
        limiter.failed(("a", "0badc0de"))
    assert limiter.retry_after(("a", "0badc0de")) == 2
    assert limiter.retry_after(("b", "0badc0de")) == 0
    assert limiter.retry_after(("a", "5ca1ab1e")) == 0


@pytest.fixture
def logging_restored() -> Iterator[None]:
    saved = structlog.get_config()
    try:
        yield
    finally:
        structlog.configure(**saved)


def _scope(path: str, state: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [],
        "query_string": b"",
        "state": state,
    }


async def _receive() -> dict[str, Any]:
    return {"type": "http.request", "body": b"{}", "more_body": False}


def _answered(status: int, **state: str) -> Any:
    """An ASGI app that leaves `state` in the request's state and answers `status`."""

    async def app(scope: Any, receive: Any, send: Any) -> None:
        scope["state"].update(state)
        await send({"type": "http.response.start", "status": status, "headers": []})
        await send({"type": "http.response.body", "body": b"{}"})

    return app


async def _ignore(_: Any) -> None:
    pass


@pytest.mark.usefixtures("logging_restored")
def test_access_line_is_one_json_line_with_the_request_fields() -> None:
    """serve's configuration writes each access line as one JSON line of bytes (orjson),
    naming the principal, method, path, status, unit and duration, escapes included."""
    stream = io.BytesIO()
    access_log.configure_logging(stream=stream)
    # Or the access logger would keep this chain for the rest of the test session.
    structlog.configure(cache_logger_on_first_use=False)
    path = '/units/"\u00e9\\\n/claim'
    logged = access_log.AccessLogMiddleware(_answered(409, principal="agent-1/x", unit_id="4f"))
    asyncio.run(logged(_scope(path, {}), _receive, _ignore))
    [line] = stream.getvalue().splitlines()
    fields = json.loads(line)
    assert {k: v for k, v in fields.items() if k not in ("duration_ms", "timestamp")} == {
        "principal": "agent-1/x",
        "method": "POST",
        "path": path,
        "status": 409,
        "unit_id": "4f",
        "event": "request",
        "level": "info",
    }
    assert fields["duration_ms"] >= 0
    written = dt.datetime.fromisoformat(fields["timestamp"].replace("Z", "+00:00"))
    assert abs((written - dt.datetime.now(dt.UTC)).total_seconds()) < 60


@pytest.mark.usefixtures("logging_restored")
def test_access_line_goes_through_structlog_once_reconfigured() -> None:
    """Once structlog is configured otherwise (here: capturing), the line is structlog's."""
    stream = io.BytesIO()
    access_log.configure_logging(stream=stream)
    structlog.configure(cache_logger_on_first_use=False)
    logged = access_log.AccessLogMiddleware(_answered(200, principal="a"))
    with capture_logs() as logs:
        asyncio.run(logged(_scope("/units/claim", {}), _receive, _ignore))
    assert stream.getvalue() == b""
    assert [(line["event"], line["principal"]) for line in logs] == [("request", "a")]


def _limited_app() -> FastAPI:
    """An app with the ledger's middlewares and one route that reads its body."""
    app = FastAPI()
    problems.install(app)

    @app.post("/echo")
    async def echo(request: Request) -> Response:
        return Response(await request.body())

    app.add_middleware(body_limit.BodyLimitMiddleware, max_body=10)
    app.add_middleware(access_log.AccessLogMiddleware)
    api_metrics.install(app)
    return app


def test_body_over_the_limit_is_413_declared_or_streamed() -> None:
    """A Content-Length over the limit is refused before the route; a body streamed past
    it is refused as it is read; both 413 problems, each timed once."""
    app = _limited_app()
    client = TestClient(app)
    assert client.post("/echo", content=b"0123456789").content == b"0123456789"
    declared = client.post("/echo", content=b"x" * 11)
    streamed = client.post("/echo", content=iter([b"x" * 6, b"x" * 6]))
    for response in (declared, streamed):
        assert (response.status_code, response.json()["code"]) == (413, "payload_too_large")
    registry = app.state.metrics.registry
    timed = [("200", "/echo"), ("413", "unmatched"), ("413", "/echo")]
    counts = [
        registry.get_sample_value(
            "work_ledger_request_duration_seconds_count",
            {"method": "POST", "route": route, "status": status},
        )
        for status, route in timed
    ]
    assert counts == [1, 1, 1]  # the declared one is refused before routing
    refused = {"code": "payload_too_large", "invariant": "none"}
    assert registry.get_sample_value("work_ledger_refusals_total", refused) == 2


def test_a_claim_answer_is_counted_once_from_what_the_route_said() -> None:
    """The claim counter reads the route's `claim_result`, not the answer's bytes."""
    metrics = LedgerMetrics()
    for result in ("new", "resumed", "resumed", None):
        state = {} if result is None else {"claim_result": result}
        timed = api_metrics.MetricsMiddleware(_answered(200, **state), metrics)
        asyncio.run(timed(_scope("/units/claim", {}), _receive, _ignore))
    counts = {
        result: metrics.registry.get_sample_value(
            "work_ledger_claim_responses_total", {"result": result}
        )
        for result in ("new", "resumed", "none")
    }
    assert counts == {"new": 1, "resumed": 2, "none": None}  # never labelled


def _unit(state: State, disposition: Disposition | None) -> Unit:
    at = dt.datetime(2026, 12, 1, 5, 0, 0, tzinfo=dt.UTC)
    later = at + dt.timedelta(seconds=1, microseconds=7)
    return Unit(
        uuid.UUID(int=1), at, later, 'ref "é" \\ ☃', "fleet", "dom", state, disposition,
        later if disposition else None, None, "agent-1/sub", later, None, 2, 125,
        ["https://ci.example/1"], uuid.UUID(int=2), 5, 6, 1, 0, ["db/orders"],
    )  # fmt: skip


def _attempt(unit: Unit, outcome: Outcome | None) -> Attempt:
    ended = None if outcome is None else unit.updated_at
    return Attempt(
        uuid.UUID(int=3), unit.id, 2, "agent-1/sub", unit.created_at, outcome, 125,
        None if outcome is None else "https://ci.example/1", ended,
    )  # fmt: skip


def _question(unit: Unit, attempt: Attempt) -> Question:
    return Question(
        uuid.UUID(int=4), unit.id, attempt.id, "why?", QuestionStatus.OPEN, None,
        "agent-questions", None, "agent-1", None, unit.created_at, None,
    )  # fmt: skip


# The bytes the claim's answer had when its wire model was a twin of the domain classes
# (ClaimOut, at e552d08): the domain classes now write them themselves.
UNIT_BYTES = (
    '{"id":"00000000-0000-0000-0000-000000000001","created_at":"2026-12-01T05:00:00Z",'
    '"updated_at":"2026-12-01T05:00:01.000007Z","external_ref":"ref \\"é\\" \\\\ ☃",'
    '"fleet":"fleet","domain":"dom","state":"in_progress","disposition":null,'
    '"disposed_at":null,"workflow_id":null,"claimed_by":"agent-1/sub",'
    '"lease_expires_at":"2026-12-01T05:00:01.000007Z","last_heartbeat_at":null,'
    '"attempt_count":2,"cost_cents":125,"evidence_urls":["https://ci.example/1"],'
    '"parent_id":"00000000-0000-0000-0000-000000000002","max_attempts":5,'
    '"attempts_allowed":6,"failed_attempts":1,"unfinished_prerequisites":0,'
    '"exclusive":["db/orders"]}'
)
ATTEMPT_BYTES = (
    '{"id":"00000000-0000-0000-0000-000000000003",'
    '"unit_id":"00000000-0000-0000-0000-000000000001","attempt_no":2,'
    '"agent_id":"agent-1/sub","started_at":"2026-12-01T05:00:00Z","outcome":null,'
    '"cost_cents":125,"evidence_url":null,"ended_at":null}'
)
QUESTION_BYTES = (
    '{"id":"00000000-0000-0000-0000-000000000004",'
    '"unit_id":"00000000-0000-0000-0000-000000000001",'
    '"attempt_id":"00000000-0000-0000-0000-000000000003","question":"why?",'
    '"status":"open","answer":null,"assignee_group_slug":"agent-questions",'
    '"external_task_id":null,"asked_by":"agent-1","answered_by":null,'
    '"created_at":"2026-12-01T05:00:00Z","closed_at":null}'
)


def test_hot_answers_keep_their_bytes() -> None:
    """Each write's answer is, byte for byte, what it was before its type was declared
    once: the claim, a unit with its attempt or question, a unit alone, nothing claimed."""
    unit = _unit(State.IN_PROGRESS, None)
    attempt = _attempt(unit, None)
    pair = f'{{"unit":{UNIT_BYTES},"attempt":{ATTEMPT_BYTES}'
    question = _question(unit, attempt)
    cases = [
        (Claim(unit, attempt, True), pair + ',"resumed":true}'),
        (answers.UnitAttempt(unit, attempt), pair + "}"),
        (
            answers.UnitQuestion(unit, question),
            f'{{"unit":{UNIT_BYTES},"question":{QUESTION_BYTES}}}',
        ),
        (answers.UnitOnly(unit), f'{{"unit":{UNIT_BYTES}}}'),
        (Claim(None, None), '{"unit":null,"attempt":null,"resumed":false}'),
    ]
    assert [bytes(wire.answer(value).body).decode() for value, _ in cases] == [
        written for _, written in cases
    ]


def test_answers_write_every_state_and_outcome_as_its_value() -> None:
    """For every state, disposition and outcome, the answer names it by its value, with
    the fields in the declared order."""
    for state in State:
        disposition = Disposition.MIGRATED if state is State.DONE else None
        unit = _unit(state, disposition)
        for outcome in (None, *Outcome):
            attempt = _attempt(unit, outcome)
            written = json.loads(wire.answer(answers.UnitAttempt(unit, attempt)).body)
            assert list(written["unit"]) == list(Unit.__dataclass_fields__)
            assert list(written["attempt"]) == list(Attempt.__dataclass_fields__)
            assert (written["unit"]["state"], written["unit"]["disposition"]) == (
                state.value,
                None if disposition is None else disposition.value,
            )
            assert written["attempt"]["outcome"] == (None if outcome is None else outcome.value)


def _boom_app() -> FastAPI:
    """The ledger's middlewares around one write that fails unexpectedly."""
    app = FastAPI()
    problems.install(app)

    @app.post("/boom")
    async def boom() -> Response:
        raise RuntimeError("boom")

    app.add_middleware(body_limit.BodyLimitMiddleware)
    app.add_middleware(access_log.AccessLogMiddleware)
    api_metrics.install(app)
    return app


def test_unexpected_error_is_a_500_problem_counted_logged_and_raised_on() -> None:
    """As Starlette's error middleware does: a 500 problem answered, counted and logged
    once, and the error raised on for the server to log."""
    app = _boom_app()
    sent: list[Any] = []

    async def send(message: Any) -> None:
        sent.append(message)

    async def call() -> None:
        scope = {**_scope("/boom", {}), "app": app}
        await app(scope, _receive, send)

    with capture_logs() as logs, pytest.raises(RuntimeError, match="boom"):
        asyncio.run(call())
    assert sent[0]["status"] == 500
    assert json.loads(sent[1]["body"])["code"] == "internal_error"
    assert [line["status"] for line in logs if line["event"] == "request"] == [500]
    registry = app.state.metrics.registry
    labels = {"code": "internal_error", "invariant": "none"}
    assert registry.get_sample_value("work_ledger_refusals_total", labels) == 1
    timed = {"method": "POST", "route": "/boom", "status": "500"}
    assert registry.get_sample_value("work_ledger_request_duration_seconds_count", timed) == 1
