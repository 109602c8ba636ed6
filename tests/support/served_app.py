"""The real work-ledger app for a test: its settings, and the app served or just running.

Shared by the API, SDK, projection and read tests: `settings_for` the test's database,
`app_running` for the app with its lifespan (driven through ASGITransport, no socket), and
`uvicorn_server` for a server on a free local port.
"""

from __future__ import annotations

import dataclasses
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import uvicorn
from fastapi import FastAPI

from support.ports import free_port
from work_ledger.api.connection import Limits, server_options
from work_ledger.config import Settings


def settings_for(database_url: str, home: Path, *, secret: str, **overrides: Any) -> Settings:
    """Settings of a test server: its own database and home, short leases, no evidence rule."""
    settings = Settings(
        database_url=database_url,
        home=home,
        lease_seconds=60,
        stall_seconds=300,
        evidence_allowed_prefixes=(),
        url="",
        token=None,
        secret=secret,
    )
    return dataclasses.replace(settings, **overrides)


@asynccontextmanager
async def app_running(settings: Settings, max_connections: int = 4) -> AsyncIterator[FastAPI]:
    """The real HTTP app over these settings, its lifespan running (no socket)."""
    from work_ledger.api.app import create_app

    app = create_app(settings, max_connections=max_connections)
    async with app.router.lifespan_context(app):
        yield app


def uvicorn_server(app: FastAPI, limits: Limits | None = None) -> tuple[str, uvicorn.Server]:
    """A quiet uvicorn server of `app` on a free local port (not started), and its URL,
    with serve's connection limits."""
    port = free_port()
    # Keep-alive longer than any test: with uvicorn's 5 s, equal to httpx's own expiry, a
    # client reusing a connection idle ~5 s races the server closing it (a ReadError on a
    # loaded machine).
    config = uvicorn.Config(
        app,
        host="127.0.0.1",
        port=port,
        log_level="warning",
        access_log=False,
        lifespan="on",
        **server_options(limits or Limits(keep_alive_seconds=300)),
    )
    return f"http://127.0.0.1:{port}", uvicorn.Server(config)
