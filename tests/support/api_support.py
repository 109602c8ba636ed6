"""Helpers for the API tests: a real uvicorn server in-process, token minting, clients."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI

from support import served_app
from work_ledger.api.connection import Limits
from work_ledger.config import Settings
from work_ledger.service.tokens import Role, TokenStore

SECRET = "test-server-secret"


def settings_for(database_url: str, home: Path, **overrides: Any) -> Settings:
    return served_app.settings_for(database_url, home, secret=SECRET, **overrides)


@dataclasses.dataclass
class Api:
    """A running server: its URL, its app, and helpers to mint tokens and make clients."""

    url: str
    app: FastAPI
    clients: list[httpx.AsyncClient] = dataclasses.field(default_factory=list)
    server: uvicorn.Server | None = None

    def connections(self, *, mid_request: bool = False) -> set[object]:
        """The HTTP connections the server holds open (it drops one once it sees the
        hang-up); with `mid_request`, only those with a request not yet answered."""
        assert self.server is not None
        return {
            conn
            for conn in self.server.server_state.connections
            if not mid_request
            or ((cycle := getattr(conn, "cycle", None)) and not cycle.response_complete)
        }

    @property
    def tokens(self) -> TokenStore:
        tokens: TokenStore = self.app.state.tokens
        return tokens

    async def token(self, role: Role | str, principal: str) -> str:
        token, _ = await self.tokens.create(role, principal)
        return token

    def client(self, token: str | None = None, **headers: str) -> httpx.AsyncClient:
        if token is not None:
            headers["Authorization"] = f"Bearer {token}"
        client = httpx.AsyncClient(base_url=self.url, headers=headers, timeout=30)
        self.clients.append(client)
        return client

    async def as_role(self, role: Role | str, principal: str | None = None) -> httpx.AsyncClient:
        return self.client(await self.token(role, principal or f"{role}-1"))


@dataclasses.dataclass
class Running:
    server: uvicorn.Server
    task: asyncio.Task[None]


async def start_server(app: FastAPI, limits: Limits | None = None) -> tuple[str, Running]:
    url, server = served_app.uvicorn_server(app, limits)
    task = asyncio.create_task(server.serve())
    async with asyncio.timeout(30):
        while not server.started:
            if task.done():
                task.result()
                raise RuntimeError("the server stopped before it started")
            await asyncio.sleep(0.01)
    return url, Running(server, task)


async def stop_server(running: Running) -> None:
    running.server.should_exit = True
    await running.task


async def until(condition: Callable[[], bool], within: float = 30) -> None:
    """Wait until `condition()` holds: the order of events, not a guess of how long it takes."""
    async with asyncio.timeout(within):
        while not condition():  # noqa: ASYNC110  (server state with no event to wait on)
            await asyncio.sleep(0.01)


async def register(
    operator: httpx.AsyncClient, *refs: str, fleet: str = "fleet-a", domain: str | None = None
) -> list[dict[str, Any]]:
    units = [
        {"external_ref": r, "fleet": fleet} | ({"domain": domain} if domain else {}) for r in refs
    ]
    response = await operator.post("/units", json={"units": units})
    assert response.status_code == 200, response.text
    registered: list[dict[str, Any]] = response.json()["units"]
    return registered


PROBLEM = "application/problem+json"


def assert_problem(
    response: httpx.Response, status: int, code: str | None = None
) -> dict[str, Any]:
    """The response is an RFC 9457 problem with this status (and code)."""
    assert response.status_code == status, response.text
    assert response.headers["content-type"].startswith(PROBLEM), response.headers
    body: dict[str, Any] = response.json()
    assert {"type", "title", "status", "detail"} <= body.keys()
    assert body["status"] == status
    if code is not None:
        assert body["code"] == code, body
    return body


def assert_refused(response: httpx.Response, invariant: str) -> dict[str, Any]:
    """A 409 naming the invariant, the unit, its state and what is allowed next."""
    body = assert_problem(response, 409)
    assert body["invariant"] == invariant, body
    assert {"unit_id", "state", "allowed"} <= body.keys(), body
    return body


async def claimed(
    agent: httpx.AsyncClient, *, start: bool = False, **claim: Any
) -> tuple[str, str]:
    """Claim the next unit (and start it): (unit id, attempt id)."""
    response = await agent.post("/units/claim", json=claim)
    assert response.status_code == 200, response.text
    unit_id, attempt_id = response.json()["unit"]["id"], response.json()["attempt"]["id"]
    if start:
        started = await agent.post(
            f"/units/{unit_id}/transition", json={"to": "in_progress", "attempt_id": attempt_id}
        )
        assert started.status_code == 200, started.text
    return unit_id, attempt_id


MakeApi = Callable[..., Awaitable[Api]]
