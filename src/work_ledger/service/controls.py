"""The fleet's flow controls (DESIGN §13): caps on live units, pause, the ramp gate.

The claim decides them itself (migration 0022); this module changes and lists them. A
change is one transaction: the scope's control row locked (or, for a scope's first row,
every write to units held off while it is created), the ramp gate asked, the row written
and one control event appended.
"""

from __future__ import annotations

import datetime as dt
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from work_ledger.db.store import Store
from work_ledger.domain import flow, keyset
from work_ledger.domain.flow import ABSENT, ControlChange
from work_ledger.domain.model import Actor, Page, State, Unit
from work_ledger.errors import InvalidInput
from work_ledger.service.reads import LedgerReads

# The fields of a scope's controls a change may set, as control events record them.
_FIELDS = ("max_live", "paused", "pause_reason", "gate")


@dataclass(frozen=True, slots=True)
class ControlEvent:
    id: int
    fleet: str
    domain: str | None
    actor: str
    before: dict[str, Any] | None
    after: dict[str, Any]
    reason: str
    forced: bool
    gate_figures: dict[str, Any] | None
    created_at: dt.datetime


def _json(value: Any) -> Any:
    """A JSON value as read: control events written before migration 0026 hold theirs as
    a JSON string of the object (the service encoded it twice)."""
    return json.loads(value) if isinstance(value, str) else value


class ControlWrites(LedgerReads):
    """Set and list the flow controls; a base of `Ledger`."""

    store: Store

    async def set_controls(self, change: ControlChange, actor: Actor) -> dict[str, Any]:
        """Upsert the controls of a fleet (domain None) or one of its domains; the scope's
        controls after the change. A gated raise of the cap is refused unless forced."""
        flow.check_change(change)
        fleet, domain = change.fleet, change.domain
        async with self._one_transaction() as store:
            row = await store.fetchrow("lock_control", fleet, domain)
            if row is None:
                await store.fetch("lock_units_for_a_new_control")
                row = await store.fetchrow("lock_control", fleet, domain)
            before = (
                None
                if row is None
                else {**{k: row[k] for k in _FIELDS}, "gate": _json(row["gate"])}
            )
            old: dict[str, Any] = before or {
                "max_live": None,
                "paused": False,
                "pause_reason": None,
                "gate": None,
            }
            max_live = old["max_live"] if change.max_live is ABSENT else change.max_live
            paused = old["paused"] if change.paused is ABSENT else change.paused
            gate = old["gate"] if change.gate is ABSENT else change.gate
            figures = None
            ruling_gate = old["gate"] or gate
            if (
                row is not None
                and ruling_gate
                and flow.is_raise(old["max_live"], max_live, existed=True)
            ):
                counted = await store.fetchrow(
                    "gate_figures",
                    fleet,
                    domain,
                    row["cap_changed_at"],
                    ruling_gate["last_attempts"],
                )
                assert counted is not None  # an aggregate always answers
                figures = flow.gate_figures(ruling_gate, dict(counted))
                if not flow.gate_open(figures) and not change.force:
                    raise flow.ramp_gate_closed(fleet, domain, figures)
            pause_reason = (
                (old["pause_reason"] if old["paused"] else change.reason) if paused else None
            )
            await store.fetchrow(
                "upsert_control",
                fleet,
                domain,
                max_live,
                paused,
                pause_reason,
                gate,  # the pool's codec encodes it: a JSON object, which the CHECK reads
                change.reason,
                actor.name,
                max_live != old["max_live"],
            )
            after = {
                "max_live": max_live,
                "paused": paused,
                "pause_reason": pause_reason,
                "gate": gate,
            }
            await store.fetchrow(
                "append_control_event",
                fleet,
                domain,
                actor.name,
                before,
                after,
                change.reason,
                bool(change.force and figures is not None),
                figures,
            )
        listed = await self.list_controls(fleet=fleet, domain=domain)
        return listed[0]

    @asynccontextmanager
    async def _one_transaction(self) -> AsyncIterator[Store]:
        """The caller's transaction (a keyed write runs in one), else a new one."""
        if self.store.conn is not None:
            yield self.store
            return
        async with self.store.transaction() as conn:
            yield self.store.on(conn)

    async def list_controls(
        self, *, fleet: str | None = None, domain: str | None = None
    ) -> list[dict[str, Any]]:
        rows = await self.store.fetch("list_controls", fleet, domain)
        return [{**dict(r), "gate": _json(r["gate"])} for r in rows]

    async def list_control_events(
        self, *, limit: int = 100, cursor: str | None = None
    ) -> Page[ControlEvent]:
        keyset.check_page_limit(limit)
        before = None
        if cursor is not None:
            if not cursor.isdigit():
                raise InvalidInput(
                    f"cursor {cursor!r} is not one this ledger issued; drop it to start over"
                )
            before = int(cursor)
        rows = await self.store.fetch("list_control_events", before, limit)
        events = [
            ControlEvent(
                **{**dict(r), **{k: _json(r[k]) for k in ("before", "after", "gate_figures")}}
            )
            for r in rows
        ]
        return Page(events, str(events[-1].id) if len(events) == limit else None)

    async def held_back_by(self, unit: Unit) -> list[dict[str, Any]]:
        """Why a ready unit is not claimed now (DESIGN §13); [] for any other unit."""
        if unit.state is not State.READY:
            return []
        controls = await self.store.fetch("closed_control_of", unit.fleet, unit.domain, True)
        budget = await self.store.fetchrow("exhausted_budget_of", unit.fleet, unit.domain)
        holders = await self.store.fetch("key_holders_of", unit.id)
        return flow.held_back_by(
            [dict(c) for c in controls],
            None if budget is None else dict(budget),
            [dict(h) for h in holders],
        )
