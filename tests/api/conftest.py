"""A real uvicorn server per test, on a free loopback port, over the test's own database."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from support.api_support import Api, MakeApi, Running, settings_for, start_server, stop_server
from work_ledger.api.connection import Limits
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.service.tokens import Role


@pytest.fixture
async def make_api(database_url: str, tmp_path: Path) -> AsyncIterator[MakeApi]:
    """Start a server with settings overridden as asked (e.g. evidence prefixes)."""
    from work_ledger.api.app import create_app

    started: list[tuple[Api, Running]] = []

    async def make(
        limits: Limits | None = None, auth_failures: FailureLimiter | None = None, **overrides: Any
    ) -> Api:
        settings = settings_for(database_url, tmp_path, **overrides)
        app = create_app(settings, max_connections=8, auth_failures=auth_failures)
        url, running = await start_server(app, limits)
        api = Api(url, app, server=running.server)
        started.append((api, running))
        return api

    yield make
    for api, running in started:
        for client in api.clients:
            await client.aclose()
        await stop_server(running)


@pytest.fixture
async def api(make_api: MakeApi) -> Api:
    return await make_api()


@pytest.fixture
async def operator(api: Api) -> httpx.AsyncClient:
    return await api.as_role(Role.OPERATOR, "op")
