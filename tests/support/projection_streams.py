"""Helpers for the projection tests: units with workflow ids, and realistic event streams."""

from __future__ import annotations

import datetime as dt
import uuid

from fastapi import FastAPI

from work_ledger.domain.model import Actor, NewUnit
from work_ledger.service.ledger import Ledger
from work_ledger.service.tokens import Role, TokenStore
from work_ledger.temporal.ingest import WorkflowEvent

OPERATOR = Actor("operator", privileged=True)
EPOCH = dt.datetime(2026, 1, 5, 9, 0, tzinfo=dt.UTC)
EVIDENCE = "https://ci.example/runs/1"


def event(workflow_id: str, kind: str, event_id: int, **detail: object) -> WorkflowEvent:
    """One event of run `run-1`, `event_id` seconds after EPOCH."""
    return WorkflowEvent(
        workflow_id,
        kind,
        EPOCH + dt.timedelta(seconds=event_id),
        run_id="run-1",
        event_id=event_id,
        detail=dict(detail),
    )


async def register_workflows(ledger: Ledger, *workflow_ids: str) -> None:
    """Register one unit per workflow id (external_ref `unit-<workflow_id>`)."""
    units = [NewUnit(f"unit-{w}", "fleet-a", "orders", workflow_id=w) for w in workflow_ids]
    await ledger.register(units, OPERATOR)


class Stream:
    """Builds the lifecycle events of one workflow, run after run, in history order."""

    def __init__(self, workflow_id: str, start: dt.datetime = EPOCH) -> None:
        self.workflow_id = workflow_id
        self.clock = start
        self.events: list[WorkflowEvent] = []
        self.run_id = ""
        self.event_id = 0

    def _add(self, kind: str, **detail: object) -> Stream:
        self.clock += dt.timedelta(seconds=7)
        self.event_id += 4
        self.events.append(
            WorkflowEvent(
                self.workflow_id,
                kind,
                self.clock,
                namespace="migrations",
                run_id=self.run_id,
                event_id=self.event_id,
                detail=dict(detail),
            )
        )
        return self

    def run(self, *kinds: str) -> Stream:
        """A new run (event ids restart at 1): started, then the given events."""
        self.run_id, self.event_id = str(uuid.uuid4()), -3
        self._add("started")
        for kind in kinds:
            if kind == "completed":
                self._add(kind, evidence_url=EVIDENCE)
            else:
                self._add(kind)
        return self


async def token(app: FastAPI, role: Role, principal: str) -> str:
    """Mint a token of `role` on the running app."""
    tokens: TokenStore = app.state.tokens
    minted, _ = await tokens.create(role, principal)
    return minted
