"""The shape of the work (DESIGN §12): registering units with prerequisites, splitting a
unit into children, waiving a requirement, and what a waiting unit waits on.

Each write is one statement (db/sql/units.sql register_units, db/sql/shape.sql): it
resolves the prerequisites, share-locks them so that none finishes unseen, and writes
the units, their requirements and their events, or nothing. Cycles are refused by the
database itself (migration 0011), whichever path inserts the requirements.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import asyncpg

from work_ledger.db.store import Store
from work_ledger.domain import input_rules, shape
from work_ledger.domain.input_rules import MAX_BATCH
from work_ledger.domain.model import Actor, NewUnit, Registered, State, Unit
from work_ledger.errors import (
    ExternalRefTaken,
    InvalidInput,
    InvariantViolation,
    NotFound,
    Unavailable,
)
from work_ledger.service.reads import LedgerReads

# How many times a registration that raced a concurrent batch for one of its new units is
# run in all (each run reads the ledger anew; a race needs a batch committing meanwhile).
RACED_TRIES = 5


@dataclass(frozen=True, slots=True)
class NewChild:
    """A child of a split: its ref, its domain (None: the parent's) and its requires."""

    external_ref: str
    domain: str | None = None
    requires: tuple[str, ...] = ()
    # None: the parent's keys; () none.
    exclusive: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class Split:
    unit: Unit
    children: list[tuple[uuid.UUID, str]]


class ShapeWrites(LedgerReads):
    """Register (with requires), split and waive; a base of `Ledger`."""

    store: Store
    max_attempts: int

    async def register(self, units: Sequence[NewUnit], actor: Actor) -> list[Registered]:
        """Register a batch; units already known by external_ref are left as they are,
        whatever they list. A unit with an unfinished prerequisite is registered waiting."""
        if not 1 <= len(units) <= MAX_BATCH:
            raise InvalidInput(
                f"register between 1 and {MAX_BATCH} units per batch, not {len(units)}"
            )
        first_seen: dict[str, int] = {}
        for position, unit in enumerate(units):
            if unit.external_ref in first_seen:
                raise InvalidInput(
                    f"external_ref {unit.external_ref!r} appears twice in this batch "
                    f"(units[{first_seen[unit.external_ref]}] and units[{position}]); send it once"
                )
            first_seen[unit.external_ref] = position
        edges = shape.requirements([(u.external_ref, u.requires) for u in units])
        args = (
            [u.external_ref for u in units],
            [u.fleet for u in units],
            [u.domain or "default" for u in units],
            [u.workflow_id for u in units],
            actor.name,
            [shape.max_attempts(u.max_attempts, self.max_attempts) for u in units],
            edges.dependents,
            edges.keys,
            edges.key_ids,
            [input_rules.exclusive_json(u.exclusive, where=u.external_ref) for u in units],
        )
        for tries_left in range(RACED_TRIES - 1, -1, -1):
            try:
                rows = await self._with_requirements("register_units", args)
                break
            except InvariantViolation as exc:
                # A concurrent batch registered one of ours after the statement's reading:
                # it refused itself whole (0018). Run again: it now sees that unit.
                if exc.invariant != "unit_registered_concurrently":
                    raise
                if not tries_left:
                    # Not a decided refusal (a 409 would be kept under the key and replayed):
                    # a 503, and the same request again under the same key runs it anew.
                    raise Unavailable(
                        f"{exc.detail}: this batch lost that race {RACED_TRIES} times in a row "
                        "and was rolled back whole; retry the same request (with the same "
                        "Idempotency-Key)"
                    ) from exc
        return [Registered(row["id"], row["external_ref"], row["created"]) for row in rows]

    async def split(
        self,
        unit_ref: str,
        children: Sequence[NewChild],
        actor: Actor,
        *,
        reason: str | None = None,
        attempt_id: uuid.UUID | None = None,
    ) -> Split:
        """in_progress → waiting on new children; the holder's attempt ends `split`."""
        if not 1 <= len(children) <= shape.MAX_CHILDREN:
            raise InvalidInput(f"split into 1..{shape.MAX_CHILDREN} children, not {len(children)}")
        refs = [c.external_ref for c in children]
        if len(set(refs)) != len(refs):
            raise InvalidInput("each child's external_ref must appear once; send each once")
        unit_id = await self.resolve(unit_ref)
        edges = shape.requirements([(c.external_ref, c.requires) for c in children])
        args = (
            unit_id,
            actor.holder,
            attempt_id,
            refs,
            [c.domain for c in children],
            edges.dependents,
            edges.keys,
            edges.key_ids,
            reason,
            actor.name,
            [
                None
                if c.exclusive is None
                else input_rules.exclusive_json(c.exclusive, where=c.external_ref)
                for c in children
            ],
        )
        try:
            rows = await self._with_requirements("split_unit", args)
        except InvariantViolation as exc:
            if exc.invariant != "unit_external_ref_unique":
                raise
            raise await self._taken(refs) from exc
        if not rows:
            raise await self._refused(unit_id, actor, "split", [State.IN_PROGRESS], attempt_id)
        parent = Unit.from_record(rows[0]["unit"])
        found = [(uuid.UUID(c["id"]), c["external_ref"]) for c in rows[0]["children"]]
        return Split(parent, found)

    async def waive(
        self, unit_ref: str, prerequisite_ref: str, actor: Actor, *, reason: str | None = None
    ) -> Unit:
        """Stop a requirement holding a unit (a DEAD or DEFERRED prerequisite never
        finishes); the unit becomes ready if nothing else holds it."""
        unit_id = await self.resolve(unit_ref)
        try:
            prerequisite_id = await self.resolve(prerequisite_ref)
        except NotFound:
            raise shape.unknown_prerequisites([prerequisite_ref]) from None
        row = await self.store.fetchrow(
            "waive_requirement", unit_id, prerequisite_id, reason, actor.name
        )
        if row is not None:
            return Unit.from_record(row["unit"])
        edge = await self.store.fetchrow("requirement_of", unit_id, prerequisite_id)
        if edge is None:
            raise InvariantViolation(
                f"unit {unit_ref} does not require {prerequisite_ref}; GET /units/{unit_ref} "
                "lists what it requires",
                invariant="requirement_exists",
                unit_id=str(unit_id),
            )
        raise InvariantViolation(
            f"the requirement of {unit_ref} on {prerequisite_ref} is already waived; "
            "nothing more to do",
            invariant="requirement_waived_once",
            unit_id=str(unit_id),
        )

    async def unit_shape(self, unit_id: uuid.UUID) -> dict[str, Any]:
        """requires, parent, children, waiting_on, subtree_cost_cents and, per attempt id,
        cost_by_model."""
        row = await self.store.fetchrow("unit_shape", unit_id)
        if row is None:
            raise NotFound(f"no unit {unit_id}; GET /units lists the registered units")
        return dict(row)

    async def _with_requirements(self, name: str, args: tuple[Any, ...]) -> list[asyncpg.Record]:
        """Run a statement that inserts requirements: an unknown prerequisite comes back as
        rows naming it (nothing written), a cycle as the database's refusal."""
        try:
            rows = await self.store.fetch(name, *args)
        except InvariantViolation as exc:
            if exc.invariant == "prerequisite_cycle":
                raise shape.cycle(exc.detail) from exc
            raise
        unknown = [row["unknown"] for row in rows if row["unknown"] is not None]
        if unknown:
            raise shape.unknown_prerequisites(unknown)
        return rows

    async def _taken(self, refs: list[str]) -> ExternalRefTaken:
        rows = await self.store.fetch("units_with_refs", refs)
        taken = [row["external_ref"] for row in rows]
        return ExternalRefTaken(
            f"these child refs are already registered: {', '.join(taken) or '(one of them)'}; "
            "a split registers new units only. Pick other refs. Nothing was written.",
            invariant="external_ref_taken",
            extra={"external_refs": taken},
        )
