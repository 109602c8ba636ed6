"""The reads of `AsyncClient` (aio.py): units, events, questions, controls, budgets and
health, each one call sent by the client's `send`."""

from __future__ import annotations

import abc
from collections.abc import AsyncIterator
from typing import Any, TypeVar

from work_ledger.client import _calls as calls
from work_ledger.client._sending import Call
from work_ledger.client.flow import Control, ControlEvent
from work_ledger.client.models import Event, Page, Question, Unit, UnitDetail
from work_ledger.client.money import Budget

T = TypeVar("T")


class AsyncReads(abc.ABC):
    """What `AsyncClient` reads; the client sends."""

    @abc.abstractmethod
    async def send(self, call: Call[T]) -> T:
        """Send one call (`AsyncClient.send`: retries, parsing)."""

    async def get_unit(self, unit: str) -> UnitDetail:
        return await self.send(calls.get_unit(unit))

    async def list_units(self, **query: Any) -> Page[Unit]:
        """Query: state, domain, fleet, disposition, limit, cursor."""
        return await self.send(calls.list_units(**query))

    async def list_events(
        self, unit: str | None = None, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[Event]:
        """Newest first; a unit's events, or all events."""
        return await self.send(calls.list_events(unit, limit, cursor))

    async def iter_events(
        self, unit: str | None = None, *, limit: int = 500
    ) -> AsyncIterator[Event]:
        """Every event (of `unit`, or all), newest first, page after page."""
        cursor: str | None = None
        while True:
            page = await self.list_events(unit, limit=limit, cursor=cursor)
            for event in page.items:
                yield event
            if page.next_cursor is None:
                return
            cursor = page.next_cursor

    async def list_questions(self, **query: Any) -> Page[Question]:
        """Query: status, assignee_group_slug, routed, limit, cursor, wait_seconds."""
        return await self.send(calls.list_questions(**query))

    async def unrouted_questions(
        self,
        *,
        assignee_group_slug: str | None = None,
        limit: int | None = None,
        wait_seconds: int | None = None,
    ) -> Page[Question]:
        """Open questions not yet routed, oldest first; `wait_seconds` long-polls for one."""
        return await self.send(calls.unrouted_questions(assignee_group_slug, limit, wait_seconds))

    async def get_question(self, question_id: str, *, wait_seconds: int | None = None) -> Question:
        return await self.send(calls.get_question(question_id, wait_seconds))

    async def list_controls(self) -> list[Control]:
        """Every controlled scope: cap and live, held, pause, drain, gate (not agents)."""
        return await self.send(calls.controls())

    async def list_control_events(
        self, *, limit: int | None = None, cursor: str | None = None
    ) -> Page[ControlEvent]:
        """Every change of the controls, newest first."""
        return await self.send(calls.control_events(limit, cursor))

    async def budgets(self) -> list[Budget]:
        """Every budget with its cap, spent and remaining cents (any role but agent)."""
        return await self.send(calls.budgets())

    async def healthz(self) -> dict[str, Any]:
        return await self.send(calls.health("/healthz"))

    async def readyz(self) -> dict[str, Any]:
        """Whether the server reaches its database (`Unavailable` after retries if not)."""
        return await self.send(calls.health("/readyz"))
