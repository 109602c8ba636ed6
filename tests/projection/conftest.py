"""Fixtures of the projection tests."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path

import httpx
import pytest
from fastapi import FastAPI

from support.projection_streams import token
from support.served_app import app_running, settings_for
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role
from work_ledger.temporal.ingest import Projector


@pytest.fixture
def projector(ledger: Ledger) -> Projector:
    return Projector(ledger)


@pytest.fixture
async def app(database_url: str, tmp_path: Path) -> AsyncIterator[FastAPI]:
    """The real HTTP app over this test's database, its lifespan running (no socket)."""
    settings = settings_for(database_url, tmp_path, secret="projection-test-secret")
    async with app_running(settings) as application:
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
