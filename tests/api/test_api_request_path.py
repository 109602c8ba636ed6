"""The request path's pure parts: every write on the direct path, bodies documented, the
nesting scan, the failure limiter, the preformatted access line, the answers written from
the domain objects."""

from __future__ import annotations

import asyncio
import datetime as dt
import io
import json
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import structlog
from fastapi import APIRouter, Request, Response
from pydantic import BaseModel
from structlog.testing import capture_logs

from work_ledger.api import metrics as api_metrics
from work_ledger.api import middleware, problems, schemas, wire
from work_ledger.api.app import LedgerApp, create_app
from work_ledger.api.direct import DirectRoutes, direct
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.api.routes import attempts
from work_ledger.config import Settings
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
    settings = Settings(
        database_url="postgresql://unused/unused",
        home=Path("/nonexistent"),
        lease_seconds=60,
        stall_seconds=None,
        evidence_allowed_prefixes=(),
        url="",
        token=None,
        secret="x" * 32,
    )
    return create_app(settings)


# DESIGN §12's writes are ordinary FastAPI routes (the request path is being rewritten
# without the direct path); they are neither hot nor planned.
ORDINARY_POSTS = {"/units/{unit:path}/split", "/units/{unit:path}/waive", "/budgets"}


def test_every_write_is_on_the_direct_path(app: Any) -> None:
    """Each hot POST of the API is planned by DirectRoutes (none falls to per-request
    solving)."""
    routes = app.direct_routes
    posts = {r.path for r in routes if "POST" in (getattr(r, "methods", None) or ())}
    posts -= ORDINARY_POSTS
    planned = DirectRoutes(app, app, routes).plans("POST")
    assert len(posts) >= 11
    assert posts == {plan.route.path for plan in planned}


def test_every_post_body_is_documented(app: Any) -> None:
    """Each POST's requestBody names a schema present in components."""
    schema = app.openapi()
    for path, operations in schema["paths"].items():
        post = operations.get("post")
        if post is None:
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
        middleware._preformatted = None


def _scope(path: str, state: dict[str, Any]) -> dict[str, Any]:
    return {"type": "http", "method": "POST", "path": path, "headers": [], "state": state}


@pytest.mark.usefixtures("logging_restored")
def test_preformatted_access_line_is_the_structlog_line() -> None:
    """serve's access line, written by one f-string, is byte for byte what its structlog
    chain renders (the timestamp aside), including escapes and nulls."""
    stream = io.StringIO()
    middleware.configure_logging(stream=stream)
    processors = structlog.get_config()["processors"]
    cases = [
        ("/units/claim", {"principal": "agent-1/x", "unit_id": "4f1c"}, 200),
        ('/units/"\u00e9\\\n/claim', {}, 422),
    ]
    for path, state, status in cases:
        started = time.perf_counter()
        middleware.log_request(_scope(path, dict(state)), status, started)
        ours = stream.getvalue().splitlines()[-1]
        fields = json.loads(ours)
        event: Any = {
            "principal": state.get("principal"),
            "method": "POST",
            "path": path,
            "status": status,
            "unit_id": state.get("unit_id"),
            "duration_ms": fields["duration_ms"],
            "event": "request",
        }
        for processor in processors:
            event = processor(None, "info", event)
        stamp = re.compile(r'"timestamp": "[^"]+"')
        assert stamp.sub("", ours) == stamp.sub("", event), path
        written = dt.datetime.fromisoformat(fields["timestamp"].replace("Z", "+00:00"))
        assert abs((written - dt.datetime.now(dt.UTC)).total_seconds()) < 60


@pytest.mark.usefixtures("logging_restored")
def test_access_line_goes_through_structlog_once_reconfigured() -> None:
    """Once structlog is configured otherwise (here: capturing), the line is structlog's."""
    stream = io.StringIO()
    middleware.configure_logging(stream=stream)
    # Or the access logger would keep this chain for the rest of the test session.
    structlog.configure(cache_logger_on_first_use=False)
    with capture_logs() as logs:
        middleware.log_request(_scope("/units/claim", {"principal": "a"}), 200, 0.0)
    assert stream.getvalue() == ""
    assert [(line["event"], line["principal"]) for line in logs] == [("request", "a")]


def _unit(state: State, disposition: Disposition | None) -> Unit:
    at = dt.datetime(2026, 12, 1, 5, 0, 0, tzinfo=dt.UTC)
    later = at + dt.timedelta(seconds=1, microseconds=7)
    return Unit(
        uuid.uuid4(), at, later, 'ref "é" \\ ☃', "fleet", "dom", state, disposition,
        later if disposition else None, None, "agent-1/sub", later, None, 2, 125,
        ["https://ci.example/1", "https://ci.example/2"], uuid.uuid4(), 5, 6, 1, 0,
    )  # fmt: skip


def _attempt(unit: Unit, outcome: Outcome | None) -> Attempt:
    ended = None if outcome is None else unit.updated_at
    return Attempt(
        uuid.uuid4(), unit.id, 2, "agent-1/sub", unit.created_at, outcome, 125,
        None if outcome is None else "https://ci.example/1", ended,
    )  # fmt: skip


def test_hot_answers_are_the_response_models_bytes() -> None:
    """Each answer written from the domain objects is byte for byte the answer its route's
    response model (the one in /openapi.json) writes, for every state and outcome."""
    cases: list[tuple[Any, Any, type[BaseModel], dict[str, Any]]] = []
    for state in State:
        disposition = Disposition.MIGRATED if state is State.DONE else None
        unit = _unit(state, disposition)
        for outcome in (None, *Outcome):
            attempt = _attempt(unit, outcome)
            question = Question(
                uuid.uuid4(), unit.id, attempt.id, "why?", QuestionStatus.OPEN, None,
                "agent-questions", None, "agent-1", None, unit.created_at, None,
            )  # fmt: skip
            pair = {"unit": unit, "attempt": attempt}
            cases += [
                (schemas.CLAIM_JSON, Claim(unit, attempt, True), schemas.ClaimOut,
                 {**pair, "resumed": True}),
                (schemas.UNIT_ATTEMPT_JSON, schemas.UnitAttempt(unit, attempt),
                 schemas.UnitAttemptOut, pair),
                (schemas.UNIT_ATTEMPT_JSON, schemas.UnitAttempt(unit, attempt),
                 attempts.AttemptUnitOut, pair),
                (schemas.UNIT_QUESTION_JSON, schemas.UnitQuestion(unit, question),
                 schemas.UnitQuestionOut, {"unit": unit, "question": question}),
                (schemas.UNIT_ONLY_JSON, schemas.UnitOnly(unit), schemas.DisposeOut,
                 {"unit": unit}),
            ]  # fmt: skip
    empty = {"unit": None, "attempt": None, "resumed": False}
    cases.append((schemas.CLAIM_JSON, Claim(None, None), schemas.ClaimOut, empty))
    for adapter, value, model, fields in cases:
        written = model.model_validate(fields, from_attributes=True).model_dump_json()
        assert adapter.dump_json(value).decode() == written


def _boom_app() -> LedgerApp:
    """A LedgerApp whose one direct write fails unexpectedly."""
    app = LedgerApp()
    problems.install(app)
    api_metrics.install(app)
    router = APIRouter()

    @router.post("/boom")
    @direct
    async def boom(request: Request) -> Response:
        raise RuntimeError("boom")

    app.include_router(router)
    app.direct_routes = router.routes
    return app


def test_unexpected_error_on_the_direct_path_is_a_500_problem_raised_on() -> None:
    """As Starlette's error middleware does: a 500 problem answered, counted and logged,
    and the error raised on for the server to log."""
    app = _boom_app()
    sent: list[Any] = []

    async def receive() -> dict[str, Any]:
        return {"type": "http.request", "body": b"{}", "more_body": False}

    async def send(message: Any) -> None:
        sent.append(message)

    async def call() -> None:
        scope = {**_scope("/boom", {}), "app": app, "query_string": b""}
        await app.build_middleware_stack()(scope, receive, send)

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
