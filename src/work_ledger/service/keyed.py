"""Keyed writes: a write that carries an idempotency key, its transaction and its outcome.

Each use case says how it is keyed (`Keying`); the rules are those of
`service/idempotency.py`:

    ATOMIC      reserve the key, run the write, store its outcome: one transaction, so all
                three commit or none. A duplicate waits on the uncommitted reservation,
                then replays the outcome (or, after a rollback, runs as if first).
                BEGIN goes with the reservation and COMMIT with the outcome, so a keyed
                write costs two round trips more than the write (docs/request-path.md).
    RERUNNABLE  ATOMIC, and an unfinished reservation (left by an older server) is taken
                over, not refused: running the write again has no second effect (a claim
                returns the unit already held).
    APART       reserve (committed), run, store: a projection batch runs one transaction
                per event, and an event is applied once by its own key.

A long-poll claim (`KeyedWrites.looks`) holds no transaction while it waits: each look
for a unit is a RERUNNABLE keyed transaction of its own; one that claims stays open until
the answer is stored with it, one that finds nothing rolls back at once.

Outcomes the ledger decided are stored: a success, and a refusal by one of its rules
(409), which is stored and then raised as usual. The write's statements run without
savepoints: a refused statement wrote nothing, so the transaction rolls back and the
refusal is stored on its own. Only where the ledger catches a refusal and goes on (a race
it resolves by looking again: `NeedsSavepoints`) does the write run again with savepoints.
Anything else (bad input, auth, a server error) ran nothing: it rolls back and frees the
key. The answer's bytes come from the caller (`answer`, `refusal`), so that a replay is the
first answer, byte for byte.
"""

from __future__ import annotations

import contextlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from enum import Enum
from typing import Protocol, TypeVar

from work_ledger.db.store import NeedsSavepoints, OpenTransaction
from work_ledger.domain.model import Claim
from work_ledger.errors import WorkLedgerError
from work_ledger.service.idempotency import IdempotencyStore, Outcome
from work_ledger.service.ledger import Ledger

T = TypeVar("T")


class Keying(Enum):
    ATOMIC = "atomic"
    RERUNNABLE = "rerunnable"
    APART = "apart"


@dataclass(frozen=True, slots=True)
class Key:
    """An idempotency key, whose it is (`scope`: role and agent) and the request's hash."""

    scope: str
    key: str
    digest: bytes


@dataclass(frozen=True, slots=True)
class Answer:
    outcome: Outcome
    replayed: bool


class Look(Protocol):
    """One look for a unit to claim (`Ledger.claim`'s signature)."""

    async def __call__(
        self, agent: str, *, domain: str | None = None, lease_seconds: int | None = None
    ) -> Claim: ...


def decided(status: int) -> bool:
    """Outcomes the ledger decided (a success, or a refusal by one of its rules) are kept;
    input, auth and server errors ran nothing, so the key is freed for a corrected retry."""
    return status < 400 or status == 409


class _Replay(Exception):
    """Leave the transaction without committing: the key holds an earlier outcome."""

    def __init__(self, outcome: Outcome) -> None:
        self.outcome = outcome


class KeyedWrites:
    """The ledger's writes, run once per idempotency key.

    `refusal` renders a ledger error as the outcome the caller answers with (the HTTP
    layer's problem document), so that a stored refusal replays exactly."""

    def __init__(self, ledger: Ledger, refusal: Callable[[WorkLedgerError], Outcome]) -> None:
        self.ledger = ledger
        self.refusal = refusal
        self.keys = IdempotencyStore(ledger.store)

    async def run(
        self,
        key: Key,
        keying: Keying,
        write: Callable[[Ledger], Awaitable[T]],
        answer: Callable[[T], Outcome],
    ) -> Answer:
        """Run `write` on the ledger, answered by `answer`, once per `key`."""
        if keying is Keying.APART:
            return await self._apart(key, write, answer)
        return await self._atomic(key, write, answer, rerunnable=keying is Keying.RERUNNABLE)

    async def _atomic(
        self,
        key: Key,
        write: Callable[[Ledger], Awaitable[T]],
        answer: Callable[[T], Outcome],
        *,
        rerunnable: bool,
    ) -> Answer:
        try:
            return await self._once(key, write, answer, rerunnable=rerunnable, savepoints=False)
        except NeedsSavepoints:
            # The ledger caught a refusal and went on (a race it resolves, rare): run the
            # write again where a refused statement leaves the transaction usable.
            return await self._once(key, write, answer, rerunnable=rerunnable, savepoints=True)

    async def _once(
        self,
        key: Key,
        write: Callable[[Ledger], Awaitable[T]],
        answer: Callable[[T], Outcome],
        *,
        rerunnable: bool,
        savepoints: bool,
    ) -> Answer:
        """One keyed transaction: begin and reserve, the write, store and commit; three
        round trips plus the write's own (docs/request-path.md)."""
        tx, owned = await self.keys.begin_reserved(
            key.scope, key.key, key.digest, rerunnable=rerunnable
        )
        try:
            if not owned:
                reservation = await IdempotencyStore(tx.store()).reserve(
                    key.scope, key.key, key.digest, rerunnable=rerunnable
                )
                if reservation.outcome is not None:
                    return Answer(reservation.outcome, replayed=True)
            try:
                outcome = answer(await write(self.ledger.on(tx.store(savepoints=savepoints))))
            except WorkLedgerError as exc:
                if not decided(exc.status):
                    raise  # it ran nothing: roll back, the key is free
                if not savepoints:
                    # The refused statement aborted the transaction and wrote nothing:
                    # roll back, and store the refusal on its own (below).
                    await tx.end()
                    return await self._refused(key, exc)
                await self.keys.complete_commit(tx, key.scope, key.key, self.refusal(exc))
                raise
            await self.keys.complete_commit(tx, key.scope, key.key, outcome)
            return Answer(outcome, replayed=False)
        finally:
            await tx.end()

    async def _refused(self, key: Key, refusal: WorkLedgerError) -> Answer:
        """Store a refusal whose transaction rolled back, then raise it; if a concurrent
        request under the key answered meanwhile, that answer is this one's too."""
        stored = await self.keys.store_alone(key.scope, key.key, key.digest, self.refusal(refusal))
        if stored.outcome is not None:
            return Answer(stored.outcome, replayed=True)
        raise refusal

    async def _apart(
        self,
        key: Key,
        write: Callable[[Ledger], Awaitable[T]],
        answer: Callable[[T], Outcome],
    ) -> Answer:
        reservation = await self.keys.reserve(key.scope, key.key, key.digest, rerunnable=True)
        if reservation.outcome is not None:
            return Answer(reservation.outcome, replayed=True)
        try:
            outcome = answer(await write(self.ledger))
        except WorkLedgerError as exc:
            if not decided(exc.status):
                await self._release_quietly(key)
                raise
            await self.keys.complete(key.scope, key.key, self.refusal(exc))
            raise
        except BaseException:
            await self._release_quietly(key)
            raise
        await self.keys.complete(key.scope, key.key, outcome)
        return Answer(outcome, replayed=False)

    async def _release_quietly(self, key: Key) -> None:
        # If even this fails, the retry takes the unfinished reservation over.
        with contextlib.suppress(Exception):
            await self.keys.release(key.scope, key.key)

    async def looks(
        self,
        key: Key,
        wait: Callable[[Look], Awaitable[Claim]],
        answer: Callable[[Claim], Outcome],
    ) -> Answer:
        """A long-poll claim: `wait` looks (with the `Look` it is given) until it has a
        claim or gives up; each look is a keyed transaction (the module docstring)."""
        looks = _Looks(self, key)
        try:
            try:
                claim = await wait(looks.look)
            except WorkLedgerError as exc:
                if not decided(exc.status):
                    raise
                stored = await looks.store_alone(self.refusal(exc))
                if stored.replayed:
                    return stored
                raise
            return await looks.finish(answer(claim))
        except _Replay as earlier:
            return Answer(earlier.outcome, replayed=True)
        finally:
            await looks.close()


class _Looks:
    """A long-poll claim's looks, each one keyed transaction; a look that claims is held
    open (`self.open`) until its answer is stored with it.

    A look that finds nothing rolls back: no reservation is held while the claim waits,
    and a same-key duplicate waiting meanwhile looks in its turn (the row lock puts the
    looks one after the other; once one has claimed, the others replay it)."""

    def __init__(self, writes: KeyedWrites, key: Key) -> None:
        self.writes, self.key = writes, key
        self.open: OpenTransaction | None = None

    async def look(
        self, agent: str, *, domain: str | None = None, lease_seconds: int | None = None
    ) -> Claim:
        await self.close()
        try:
            return await self._look(agent, domain, lease_seconds, savepoints=False)
        except NeedsSavepoints:  # as in KeyedWrites._atomic
            return await self._look(agent, domain, lease_seconds, savepoints=True)

    async def _look(
        self, agent: str, domain: str | None, lease_seconds: int | None, *, savepoints: bool
    ) -> Claim:
        writes, key = self.writes, self.key
        tx, owned = await writes.keys.begin_reserved(
            key.scope, key.key, key.digest, rerunnable=True
        )
        try:
            if not owned:
                reservation = await IdempotencyStore(tx.store()).reserve(
                    key.scope, key.key, key.digest, rerunnable=True
                )
                if reservation.outcome is not None:
                    raise _Replay(reservation.outcome)
            bound = writes.ledger.on(tx.store(savepoints=savepoints))
            claim = await bound.claim(agent, domain=domain, lease_seconds=lease_seconds)
        except BaseException:
            await tx.end()
            raise
        if claim.unit is None:
            await tx.end()  # nothing to keep: the key is free while we wait
        else:
            self.open = tx
        return claim

    async def finish(self, outcome: Outcome) -> Answer:
        """Store the answer with the claim that made it, or alone (an empty wait)."""
        if self.open is None:
            return await self.store_alone(outcome)
        await self.writes.keys.complete_commit(self.open, self.key.scope, self.key.key, outcome)
        return Answer(outcome, replayed=False)

    async def store_alone(self, outcome: Outcome) -> Answer:
        """Store `outcome` under the key, unless another request under it answered first."""
        key = self.key
        earlier = await self.writes.keys.store_alone(key.scope, key.key, key.digest, outcome)
        if earlier.outcome is not None:
            return Answer(earlier.outcome, replayed=True)
        return Answer(outcome, replayed=False)

    async def close(self) -> None:
        """Roll back a look left open (the request failed or was cancelled)."""
        if self.open is not None:
            tx, self.open = self.open, None
            await tx.end()
