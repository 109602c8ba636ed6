"""Live cost from Claude Code's telemetry, and its final result above it (DESIGN §13).

Both sources describe the same spend: telemetry one API call at a time, the result the
session's totals. The database keeps, per attempt and model, the larger of the two
(attempt_model_spend, migration 0024), so whichever arrives later records only what it adds.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass

from work_ledger.db.store import Store
from work_ledger.domain.model import Actor, Attempt, Unit
from work_ledger.domain.shape import CostRecord, check_cost_record
from work_ledger.domain.telemetry import TelemetryRecord, plain_model
from work_ledger.errors import InvalidInput
from work_ledger.service.reads import LedgerReads


@dataclass(frozen=True, slots=True)
class TelemetryOutcome:
    """What a batch did: records dropped (unknown or another agent's attempt), records
    counted for the first time, and the cents they added."""

    dropped: int
    counted: int
    cents: int


class TelemetryWrites(LedgerReads):
    """Telemetry batches and results above them; a base of `Ledger`."""

    store: Store

    async def record_telemetry(
        self, records: Sequence[TelemetryRecord], agent: str | None, actor: Actor
    ) -> TelemetryOutcome:
        """Add a batch's api_request records to their attempts (of `agent`, or any when
        None), once per record, as estimated cost records per (attempt, model)."""
        if not records:
            return TelemetryOutcome(0, 0, 0)
        row = await self.store.fetchrow(
            "record_telemetry",
            [r.attempt_id for r in records],
            [r.key for r in records],
            [r.model for r in records],
            [r.cost_usd for r in records],
            [r.input_tokens for r in records],
            [r.output_tokens for r in records],
            [r.cache_read_tokens for r in records],
            [r.cache_write_tokens for r in records],
            agent,
            actor.name,
        )
        assert row is not None  # an aggregate always answers
        return TelemetryOutcome(row["dropped"], row["counted"], row["cents"])

    async def record_result_cost(
        self, attempt_id: uuid.UUID, record: CostRecord, actor: Actor
    ) -> tuple[Unit, Attempt]:
        """A session's final figures for one model, recorded only above what telemetry
        (or an earlier result) already recorded for it: never twice."""
        check_cost_record(record)
        if record.model is None:
            raise InvalidInput(
                "includes_telemetry needs the model the figures are for; send the record "
                "without includes_telemetry to record it as it is"
            )
        row = await self.store.fetchrow(
            "record_result_cost",
            attempt_id,
            actor.holder,
            actor.name,
            plain_model(record.model),
            record.cost_cents,
            record.input_tokens or 0,
            record.output_tokens or 0,
            record.cache_read_tokens or 0,
            record.cache_write_tokens or 0,
        )
        if row is None:
            raise await self._attempt_refused(attempt_id, actor, "record cost for")
        return Unit.from_record(row["unit"]), Attempt.from_record(row["attempt"])
