"""Fixtures of the projection tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI
from projection_streams import token

from work_ledger.auth import Role
from work_ledger.config import Settings
from work_ledger.projection import Projector
from work_ledger.service import Ledger


@pytest.fixture
def projector(ledger: Ledger) -> Projector:
    return Projector(ledger)


@pytest.fixture
async def app(database_url: str, tmp_path: Path) -> AsyncIterator[FastAPI]:
    """The real HTTP app over this test's database, its lifespan running (no socket)."""
    from work_ledger.api.app import create_app

    settings = Settings(
        database_url=database_url,
        home=tmp_path,
        lease_seconds=60,
        stall_seconds=300,
        evidence_allowed_prefixes=(),
        url="",
        token=None,
        secret="projection-test-secret",
    )
    application = create_app(settings, max_connections=4)
    async with application.router.lifespan_context(application):
        yield application


@pytest.fixture
async def projector_client(app: FastAPI) -> AsyncIterator[httpx.AsyncClient]:
    """A client holding a projector token, talking to the app through ASGITransport."""
    headers = {"Authorization": f"Bearer {await token(app, Role.PROJECTOR, 'temporal')}"}
    transport = httpx.ASGITransport(app=app)
    async with httpx.AsyncClient(
        transport=transport, base_url="http://ledger.test", headers=headers
    ) as client:
        yield client
