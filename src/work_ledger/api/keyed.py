"""Keyed writes on one connection: the ledger bound to a transaction, and a long-poll
claim's looks, each reserving its Idempotency-Key in a transaction of its own.

A reservation is an uncommitted row of the transaction that runs the write, so its
liveness is the connection's: a duplicate waits on the row, and is freed by the commit
(it replays the outcome) or by the connection dying (a killed server, a database
failover), after which it runs as if for the first time. No timer decides that a
reservation is dead.
"""

from __future__ import annotations

import contextlib
import copy
from typing import TYPE_CHECKING, Any, cast

import asyncpg
from fastapi import Response

from work_ledger.api import problems
from work_ledger.db.pool import Pool
from work_ledger.db.store import Store, translated_errors
from work_ledger.domain.model import Claim
from work_ledger.errors import WorkLedgerError
from work_ledger.service.idempotency import IdempotencyStore, Outcome
from work_ledger.service.ledger import Ledger

if TYPE_CHECKING:
    from asyncpg.transaction import Transaction

REPLAYED_HEADER = "Idempotent-Replayed"


class _OnConnection:
    """What Store needs of a pool (fetch, fetchrow), on one connection in a transaction."""

    def __init__(self, conn: asyncpg.Connection, *, savepoints: bool) -> None:
        self.conn = conn
        self.savepoints = savepoints

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        if not self.savepoints:
            return await self.conn.fetch(query, *args)
        async with self.conn.transaction():  # a savepoint: a refusal leaves the tx usable
            return await self.conn.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        if not self.savepoints:
            return await self.conn.fetchrow(query, *args)
        async with self.conn.transaction():
            return await self.conn.fetchrow(query, *args)


def on(conn: asyncpg.Connection, *, savepoints: bool = False) -> Pool:
    # Store only calls fetch and fetchrow; this stands in for its pool.
    return cast(Pool, _OnConnection(conn, savepoints=savepoints))


def keys_on(conn: asyncpg.Connection) -> IdempotencyStore:
    return IdempotencyStore(Store(on(conn)))


def bound_ledger(base: Ledger, conn: asyncpg.Connection) -> Ledger:
    """The app's ledger, running its statements on `conn`, each in a savepoint (the
    service may look again after a refused statement)."""
    bound = copy.copy(base)
    bound.store = Store(on(conn, savepoints=True))
    return bound


def replay(stored: Outcome) -> Response:
    return Response(
        stored.body,
        status_code=stored.status,
        media_type=stored.content_type,
        headers={REPLAYED_HEADER: "true"},
    )


def stored(response: Response) -> Outcome:
    media_type = response.headers.get("content-type", "application/json")
    return Outcome(response.status_code, media_type, bytes(response.body))


def is_decision(status: int) -> bool:
    """Outcomes the ledger decided (a success, or a refusal by one of its rules) are kept;
    input, auth and server errors ran nothing, so the key is freed for a corrected retry."""
    return status < 400 or status == 409


class Replayed(Exception):
    """A look found the outcome of an earlier request under the same key."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


class ClaimLooks:
    """A long-poll claim's looks for a unit, each one keyed transaction.

    A look that claims keeps its transaction open until the route has answered, so the
    key, the claim and the stored answer commit together. A look that finds nothing rolls
    back: no reservation is held while the claim waits, and a same-key duplicate waiting
    meanwhile looks in its turn (the row lock puts the looks one after the other; once one
    has claimed, the others replay it)."""

    def __init__(self, base: Ledger, scope: str, key: str, digest: bytes) -> None:
        self.base, self.scope, self.key, self.digest = base, scope, key, digest
        self._open: tuple[asyncpg.Connection, Transaction] | None = None

    def ledger(self) -> Ledger:
        """The ledger the route sees: its `claim` is one keyed look."""
        looking = copy.copy(self.base)
        looking.claim = self.look  # type: ignore[method-assign]  # the route's claim, keyed
        return looking

    async def look(
        self, agent: str, *, domain: str | None = None, lease_seconds: int | None = None
    ) -> Claim:
        await self.close()
        pool = self.base.store.pool
        async with translated_errors():
            conn = await pool.acquire()
            tx = conn.transaction()
            try:
                await tx.start()
                reservation = await keys_on(conn).reserve(
                    self.scope, self.key, self.digest, rerunnable=True
                )
                if reservation.outcome is not None:
                    raise Replayed(reservation.outcome)
                bound = bound_ledger(self.base, conn)
                claim = await bound.claim(agent, domain=domain, lease_seconds=lease_seconds)
            except BaseException:
                await _end(pool, conn, tx)
                raise
        if claim.unit is None:
            await _end(pool, conn, tx)  # nothing to keep: the key is free while we wait
        else:
            self._open = (conn, tx)
        return claim

    async def finish(self, response: Response) -> Response:
        """Store the route's answer with the claim that made it (or alone, for an empty
        wait or a refusal), unless another request under this key answered first."""
        try:
            async with translated_errors():
                if self._open is not None:
                    conn, tx = self._open
                    if is_decision(response.status_code):
                        await keys_on(conn).complete(self.scope, self.key, stored(response))
                        await tx.commit()
                    return response
                if not is_decision(response.status_code):
                    return response
                async with self.base.store.pool.acquire() as conn, conn.transaction():
                    keys = keys_on(conn)
                    earlier = await keys.reserve(self.scope, self.key, self.digest, rerunnable=True)
                    if earlier.outcome is not None:
                        return replay(earlier.outcome)
                    await keys.complete(self.scope, self.key, stored(response))
                    return response
        except WorkLedgerError as exc:
            return problems.error_response(exc)
        finally:
            await self.close()

    async def close(self) -> None:
        """Roll back a look left open (the request failed or was cancelled)."""
        if self._open is not None:
            conn, tx = self._open
            self._open = None
            await _end(self.base.store.pool, conn, tx)


async def _end(pool: Pool, conn: asyncpg.Connection, tx: Transaction) -> None:
    """Roll back (a no-op after a commit) and give the connection back; a dead connection
    has rolled back already, and the pool drops it."""
    with contextlib.suppress(Exception):
        await tx.rollback()
    with contextlib.suppress(Exception):
        await pool.release(conn)
