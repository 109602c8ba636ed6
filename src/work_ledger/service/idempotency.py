"""Idempotency records in the database, so that every replica agrees (DESIGN §6).

A write that carries `Idempotency-Key` first reserves (caller, key) with one
`INSERT ... ON CONFLICT` statement: exactly one of any number of concurrent duplicates
wins the reservation and runs; the others wait for its outcome. The outcome (status,
content type, body) of a success or a 409 is stored with a hash of the request, so a
replay returns it unchanged and a different request under the same key is refused. Any
other outcome (bad input, auth, server error) ran nothing and frees the key for a
corrected retry.

No reservation is ever guessed dead by a timer. Every keyed write, claims included,
holds its reservation as an uncommitted row in the transaction that runs the write and
stores the outcome: a duplicate blocks on that row and is freed the
moment the transaction ends, by a commit (it then replays the outcome) or by its
connection dying (a killed server, a database failover: PostgreSQL rolls it back, and the
retry runs as if for the first time). A long-poll claim holds no transaction while it
waits: each look for a unit reserves the key in a transaction of its own. Only projection
batches reserve apart (each event is a transaction of its own). Re-running a projection
batch (an event is applied once, by its key) or a claim (it returns the unit already
held) has no second effect, so an unfinished reservation of theirs is taken over at once;
for any other write it means the outcome is unknown. Records expire after a day.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from dataclasses import dataclass

import asyncpg

from work_ledger.db.store import OpenTransaction, Store
from work_ledger.errors import IdempotencyKeyReused, InvalidInput, InvariantViolation

EXPIRE_SECONDS = 86400
NEVER = 10.0 * 365 * 86400  # seconds: an atomic reservation is never taken over
# A re-runnable reservation found unfinished is taken over once its first statement has
# committed; a few tries cover a concurrent duplicate whose snapshot is newer than ours.
TAKEOVER_TRIES = 5
MAX_KEY_LENGTH = 255


@dataclass(frozen=True, slots=True)
class Outcome:
    status: int
    content_type: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Reservation:
    """Either this request owns the key (`outcome` None) or here is the stored outcome."""

    owned: bool
    outcome: Outcome | None


def check_key(key: str) -> str:
    if not 1 <= len(key) <= MAX_KEY_LENGTH or not key.isascii() or not key.isprintable():
        raise InvalidInput(
            f"Idempotency-Key must be 1..{MAX_KEY_LENGTH} printable ASCII characters "
            "(a UUID works well); send a new one per distinct write and reuse it only to retry"
        )
    return key


def request_hash(method: str, path: str, query: str, body: bytes) -> bytes:
    """A hash of the request; JSON bodies are canonicalised (key order, whitespace)."""
    try:
        canonical = json.dumps(json.loads(body), sort_keys=True, separators=(",", ":")).encode()
    except ValueError:
        canonical = body
    digest = hashlib.sha256()
    for part in (method.encode(), path.encode(), query.encode(), canonical):
        digest.update(len(part).to_bytes(8, "big"))
        digest.update(part)
    return digest.digest()


class IdempotencyStore:
    def __init__(self, store: Store) -> None:
        self.store = store

    async def begin_reserved(
        self, scope: str, key: str, digest: bytes, *, rerunnable: bool
    ) -> tuple[OpenTransaction, bool]:
        """Begin a keyed write's transaction and reserve the key in it, in one round trip;
        True if this request owns the key. If not, `reserve` in that transaction says why."""
        tx, status = await self.store.begin(
            "idempotency_begin_reserve",
            scope=scope,
            key=key,
            digest=digest,
            takeover=0.0 if rerunnable else NEVER,
        )
        return tx, status == "SELECT 1"

    async def complete_commit(
        self, tx: OpenTransaction, scope: str, key: str, outcome: Outcome
    ) -> None:
        """Store the outcome in the keyed write's transaction and commit it: one round trip."""
        await tx.commit(
            "idempotency_complete_commit",
            scope=scope,
            key=key,
            status=outcome.status,
            content_type=outcome.content_type,
            body=outcome.body,
        )

    async def store_alone(
        self, scope: str, key: str, digest: bytes, outcome: Outcome
    ) -> Reservation:
        """Store `outcome` under the key on its own (a refusal whose transaction rolled
        back), unless another request under the key answered first: then its outcome."""
        for _ in range(TAKEOVER_TRIES):
            row = await self.store.fetchrow(
                "idempotency_store",
                scope,
                key,
                digest,
                outcome.status,
                outcome.content_type,
                outcome.body,
            ) or await self.store.fetchrow("idempotency_lookup", scope, key)
            if row is None:
                continue  # the other holder rolled back between our two statements
            if row["reserved"]:
                return Reservation(True, None)
            _same_request(row, key, digest)
            if row["status_code"] is not None:
                return Reservation(False, _outcome(row))
            await asyncio.sleep(0.01)  # an unfinished reservation (a projection batch)
        raise _in_flight(key)

    async def reserve(
        self, scope: str, key: str, digest: bytes, *, rerunnable: bool
    ) -> Reservation:
        """Own the key, or get the outcome stored under it.

        A reservation found unfinished (committed without an outcome) was left by a server
        older than the one-transaction rule, or is a projection batch in flight. A
        `rerunnable` write (a claim, a projection batch: running it again has no second
        effect) takes it over at once; any other write's outcome is unknown, never re-run."""
        takeover = 0.0 if rerunnable else NEVER
        for _ in range(TAKEOVER_TRIES):
            # An uncommitted duplicate makes this statement wait until its transaction ends.
            row = await self.store.fetchrow(
                "idempotency_reserve", scope, key, digest, takeover
            ) or await self.store.fetchrow("idempotency_lookup", scope, key)
            if row is None:
                continue  # the other holder rolled back between our two statements
            if row["reserved"]:
                return Reservation(True, None)
            _same_request(row, key, digest)
            if row["status_code"] is not None:
                return Reservation(False, _outcome(row))
            if not rerunnable:
                raise _outcome_unknown(key)
            await asyncio.sleep(0.01)
        raise _in_flight(key)

    async def complete(self, scope: str, key: str, outcome: Outcome) -> None:
        await self.store.fetchrow(
            "idempotency_complete", scope, key, outcome.status, outcome.content_type, outcome.body
        )

    async def release(self, scope: str, key: str) -> None:
        await self.store.fetchrow("idempotency_release", scope, key)

    async def expire(self, older_than_seconds: int = EXPIRE_SECONDS) -> None:
        await self.store.fetchrow("idempotency_expire", older_than_seconds)


def _same_request(row: asyncpg.Record, key: str, digest: bytes) -> None:
    if bytes(row["request_hash"]) != digest:
        raise IdempotencyKeyReused(
            f"Idempotency-Key {key!r} was already used by you for a different "
            "request; use a new key for a new write, and the same key only to "
            "retry the very same request"
        )


def _in_flight(key: str) -> InvariantViolation:
    return InvariantViolation(
        f"a request with Idempotency-Key {key!r} is still running; retry the same "
        "request with the same key in a second",
        invariant="idempotency_key_in_flight",
    )


def _outcome_unknown(key: str) -> InvariantViolation:
    return InvariantViolation(
        f"a server stopped while running this request (Idempotency-Key {key!r}) and did not "
        "record its outcome, so whether it applied is unknown. Read the unit or attempt "
        "(GET /units/{unit}) to see, and send any further write with a new key",
        invariant="idempotency_outcome_unknown",
    )


def _outcome(row: asyncpg.Record) -> Outcome:
    return Outcome(row["status_code"], row["content_type"], bytes(row["body"]))
