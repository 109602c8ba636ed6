"""/healthz, /readyz, the access log, the first operator token and the loopback guard."""

from __future__ import annotations

import dataclasses
import stat

import httpx
import pytest
from structlog.testing import capture_logs

from support.api_support import Api, MakeApi, assert_problem, register, settings_for
from work_ledger.api.app import create_app
from work_ledger.service.tokens import OPERATOR_TOKEN_FILE, Role


async def test_healthz_and_readyz_need_no_token(api: Api) -> None:
    """Both answer 200 without a token while the database is up."""
    client = api.client()
    assert (await client.get("/healthz")).json() == {"status": "ok"}
    assert (await client.get("/readyz")).json() == {"status": "ok"}


async def test_readyz_is_503_problem_when_the_database_is_gone(api: Api) -> None:
    """With the pool closed, /readyz is a 503 problem while /healthz stays up."""
    client = api.client()
    await api.app.state.ledger.store.pool.close()
    assert_problem(await client.get("/readyz"), 503, "unavailable")
    assert (await client.get("/healthz")).status_code == 200


async def test_access_log_names_principal_unit_status(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """One structured line per request with principal, method, path, status, unit, duration."""
    [unit] = await register(operator, "a")
    agent = api.client(await api.token(Role.AGENT, "agent-9"))
    with capture_logs() as logs:
        await agent.post("/units/claim", json={})
    [line] = [entry for entry in logs if entry["event"] == "request"]
    assert {k: line[k] for k in ("principal", "method", "path", "status", "unit_id")} == {
        "principal": "agent-9",
        "method": "POST",
        "path": "/units/claim",
        "status": 200,
        "unit_id": unit["id"],
    }
    assert line["duration_ms"] >= 0


async def test_openapi_documents_problem_json(api: Api) -> None:
    """Every operation with a body documents 409/422 as application/problem+json."""
    schema = (await api.client().get("/openapi.json")).json()
    assert "Problem" in schema["components"]["schemas"]
    claim = schema["paths"]["/units/claim"]["post"]["responses"]
    assert set(claim["409"]["content"]) == {"application/problem+json"}
    assert set(claim["422"]["content"]) == {"application/problem+json"}


async def test_openapi_documents_the_token_and_headers(api: Api) -> None:
    """The token, X-WL-Agent and Idempotency-Key are read by hand, and still documented."""
    schema = (await api.client().get("/openapi.json")).json()
    assert schema["components"]["securitySchemes"]["HTTPBearer"]["scheme"] == "bearer"

    def headers(path: str, method: str) -> set[str]:
        operation = schema["paths"][path][method]
        return {p["name"] for p in operation.get("parameters", ()) if p["in"] == "header"}

    claim = schema["paths"]["/units/claim"]["post"]
    assert claim["security"] == [{"HTTPBearer": []}]
    assert headers("/units/claim", "post") == {"X-WL-Agent", "Idempotency-Key"}
    assert headers("/attempts/{attempt_id}/cost", "post") == {"X-WL-Agent", "Idempotency-Key"}
    assert headers("/units", "get") == {"X-WL-Agent"}
    assert "security" not in schema["paths"]["/healthz"]["get"]
    assert headers("/healthz", "get") == set()


async def test_first_start_mints_operator_token_0600(database_url: str, tmp_path: object) -> None:
    """No token yet: the server mints an operator token into WL_HOME/operator.token (0600)."""
    settings = settings_for(database_url, tmp_path)  # type: ignore[arg-type]
    app = create_app(settings, bootstrap=True)
    async with app.router.lifespan_context(app):
        path = settings.home / OPERATOR_TOKEN_FILE
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        principal = await app.state.tokens.verify(path.read_text().strip())
        assert (principal.role, principal.principal) == (Role.OPERATOR, "operator")
    again = create_app(settings, bootstrap=True)
    async with again.router.lifespan_context(again):
        assert len(await again.state.tokens.list()) == 1


async def test_non_loopback_bind_without_tokens_is_refused(
    database_url: str, tmp_path: object
) -> None:
    """Serving 0.0.0.0 before any token exists stops at startup; with a token it starts."""
    settings = settings_for(database_url, tmp_path)  # type: ignore[arg-type]
    app = create_app(settings, host="0.0.0.0", bootstrap=True)
    with pytest.raises(SystemExit, match="no API token exists"):
        async with app.router.lifespan_context(app):
            pass
    local = create_app(dataclasses.replace(settings), bootstrap=False)
    async with local.router.lifespan_context(local):
        assert await local.state.tokens.count_live() == 0
        await local.state.tokens.create(Role.OPERATOR, "ops")
    public = create_app(settings, host="0.0.0.0")
    async with public.router.lifespan_context(public):
        assert await public.state.tokens.count_live() == 1


async def test_docs_are_off_and_metrics_open_by_default(api: Api) -> None:
    """No /docs (its assets would load from a CDN) unless WL_DOCS; /metrics needs no token."""
    client = api.client()
    assert_problem(await client.get("/docs"), 404)
    assert (await client.get("/metrics")).status_code == 200


async def test_metrics_token_option_requires_a_token(make_api: MakeApi) -> None:
    """With metrics_token, /metrics is 401 without a token and 200 with a reader's."""
    api = await make_api(metrics_token=True, docs=True)
    assert_problem(await api.client().get("/metrics"), 401, "unauthorized")
    reader = await api.as_role(Role.READER, "scraper")
    response = await reader.get("/metrics")
    assert response.status_code == 200
    assert "work_ledger_units" in response.text
    assert (await api.client().get("/docs")).status_code == 200


async def test_serve_folds_the_read_summaries_change_rows(
    make_api: MakeApi, database_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A running server folds the change rows of the read summaries (migration 0017) on
    its timer: the rows a registration appended are gone, and the tallies hold them."""
    import asyncio

    import asyncpg

    from work_ledger.api import app as app_module

    monkeypatch.setattr(app_module, "FOLD_EVERY_SECONDS", 0.05)
    monkeypatch.setattr(app_module, "FOLD_MIN_ROWS", 10_000)  # below it: every 10th tick
    api = await make_api()
    operator = await api.as_role(Role.OPERATOR, "op")
    await register(operator, "f1", "f2")
    raw = await asyncpg.connect(database_url)
    try:
        for _ in range(200):  # 10 s at most; a fold comes every 0.5 s here
            if await raw.fetchval("SELECT count(*) FROM wl_unit_changes") == 0:
                break
            await asyncio.sleep(0.05)
        assert await raw.fetchval("SELECT count(*) FROM wl_unit_changes") == 0
        assert await raw.fetchval("SELECT sum(units) FROM wl_unit_tallies") == 2
    finally:
        await raw.close()
