"""What the follower keeps in the ledger's database: its checkpoint, and the units it holds.

The follower writes units only through the HTTP ingest (one path to the tables); it reads
the database for two things the ingest does not serve: where its sweep stands (table
`temporal_follow_checkpoints`, migration 0009), and which workflows' units are still held
by the projection (it describes those on every pass).
"""

from __future__ import annotations

import datetime as dt

from work_ledger.db.connect import connect
from work_ledger.db.queries import QUERIES
from work_ledger.db.store import translated_errors


class FollowState:
    """The follower's durable state, one short connection per call."""

    def __init__(self, database_url: str) -> None:
        self.database_url = database_url

    async def checkpoint(self, namespace: str) -> dt.datetime | None:
        """The close time the sweep of `namespace` has reached; None if it never ran."""
        conn = await connect(self.database_url)
        try:
            async with translated_errors():
                found: dt.datetime | None = await conn.fetchval(
                    QUERIES["follow_checkpoint"], namespace
                )
                return found
        finally:
            await conn.close()

    async def advance(self, namespace: str, swept_until: dt.datetime) -> dt.datetime:
        """Move the checkpoint forward (never back); returns where it stands now."""
        conn = await connect(self.database_url)
        try:
            async with translated_errors():
                stands: dt.datetime = await conn.fetchval(
                    QUERIES["follow_advance_checkpoint"], namespace, swept_until
                )
                return stands
        finally:
            await conn.close()

    async def held_workflows(self) -> list[str]:
        """Workflow ids whose units the projection holds (claimed, in_progress, blocked)."""
        conn = await connect(self.database_url)
        try:
            async with translated_errors():
                rows = await conn.fetch(QUERIES["follow_held_units"])
        finally:
            await conn.close()
        return [r["workflow_id"] for r in rows]
