"""Bulk operations (DESIGN §13): dispose or release every unit a filter matches, at once.

A bulk run is one statement (db/sql/bulk.sql): it locks the matching units, decides each
one from the row it locked, and, unless it is a dry run, writes every change with each
unit's ordinary event, so all of `changed` commits or none of it. A dry run is the same
statement writing nothing, so its answer is what the real run would do at that moment.
A unit whose state does not allow the action is skipped with the rule that refuses it;
more matches than `limit` is a 422 naming the count, and changes nothing.
"""

from __future__ import annotations

import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Annotated, ClassVar

import asyncpg
from pydantic import Field

from work_ledger.db.store import Store
from work_ledger.domain.model import (
    NEXT_ACTIONS,
    Actor,
    Disposition,
    State,
    states_disposable_as,
)
from work_ledger.errors import InvalidInput

DEFAULT_LIMIT = 1000
MAX_LIMIT = 10_000
# The rule a skipped unit broke: the same one a single dispose or release names (409).
SKIP_RULE = "unit_state_transition_allowed"
_RELEASABLE = (State.CLAIMED, State.IN_PROGRESS)


class BulkAction(StrEnum):
    DISPOSE = "dispose"
    RELEASE = "release"


@dataclass(frozen=True, slots=True)
class BulkFilter:
    """Which units: those of `fleet`, narrowed by each field given."""

    fleet: str
    domain: str | None = None
    states: tuple[State, ...] | None = None
    external_ref_prefix: str | None = None
    held_by: str | None = None


# These three are POST /units/bulk's answer as well (api/routes/bulk.py): pydantic reads
# their `Field`s for the wire's names and the OpenAPI document's descriptions.


@dataclass(frozen=True, slots=True)
class BulkChanged:
    # The wire calls the states `from` and `to`, which Python cannot name a field.
    __pydantic_config__: ClassVar[dict[str, bool]] = {"serialize_by_alias": True}

    id: uuid.UUID
    external_ref: str
    from_state: Annotated[State, Field(serialization_alias="from")]
    to_state: Annotated[State, Field(serialization_alias="to")]


@dataclass(frozen=True, slots=True)
class BulkSkipped:
    id: uuid.UUID
    external_ref: str
    state: State
    rule: Annotated[str, Field(description="The ledger rule that keeps this unit as it is.")]
    reason: Annotated[
        str, Field(description="Why it was skipped and what is allowed from its state.")
    ]


@dataclass(frozen=True, slots=True)
class BulkResult:
    __pydantic_config__: ClassVar[dict[str, bool]] = {"serialize_by_alias": True}

    dry_run: bool
    matched: Annotated[int, Field(description="How many units the filter matched, in any state.")]
    changed: list[BulkChanged]
    skipped: list[BulkSkipped]
    operation: Annotated[
        uuid.UUID | None,
        Field(
            serialization_alias="operation_id",
            description="A real run's id, in each of its events' detail.bulk.operation; "
            "null for a dry run.",
        ),
    ]


def check_bulk(
    action: BulkAction, disposition: Disposition | None, reason: str, limit: int
) -> None:
    """The input rules every caller shares (the API checks them first, as a 422 too)."""
    if action is BulkAction.DISPOSE and disposition is None:
        raise InvalidInput(
            "a bulk dispose needs a disposition: MIGRATED, DROPPED, DEFERRED or DEAD"
        )
    if action is BulkAction.RELEASE and disposition is not None:
        raise InvalidInput(
            "a bulk release ends each attempt abandoned and takes no disposition; drop it"
        )
    if not reason.strip():
        raise InvalidInput("a bulk operation needs a reason: say why these units change")
    if isinstance(limit, bool) or not 1 <= limit <= MAX_LIMIT:
        raise InvalidInput(f"limit must be a whole number 1..{MAX_LIMIT}, not {limit!r}")


def _skip_reason(action: str, external_ref: str, state: State, leaving: Sequence[State]) -> str:
    needs = " or ".join(leaving) or "no state"
    allowed = ", ".join(NEXT_ACTIONS[state]) or "nothing (the unit is closed for good)"
    return (
        f"{SKIP_RULE}: unit {external_ref} is {state}; {action} needs it {needs}. "
        f"Allowed from {state}: {allowed}."
    )


class BulkWrites:
    """Bulk dispose and release; a base of `Ledger`."""

    store: Store

    async def bulk(
        self,
        action: BulkAction,
        where: BulkFilter,
        actor: Actor,
        *,
        reason: str,
        disposition: Disposition | None = None,
        dry_run: bool = True,
        limit: int = DEFAULT_LIMIT,
    ) -> BulkResult:
        """Dispose (as `disposition`) or release every unit `where` matches, in one
        transaction; a dry run answers the same and writes nothing."""
        check_bulk(action, disposition, reason, limit)
        operation = uuid.uuid4()
        states = None if where.states is None else list(where.states)
        scope = (where.fleet, where.domain, states, where.external_ref_prefix, where.held_by)
        if disposition is not None:
            leaving: Sequence[State] = states_disposable_as(disposition)
            what = f"dispose {disposition}"
            rows = await self.store.fetch(
                "bulk_dispose_units",
                *scope,
                limit,
                disposition,
                list(leaving),
                reason,
                actor.name,
                dry_run,
                operation,
            )
        else:
            leaving, what = _RELEASABLE, "release"
            rows = await self.store.fetch(
                "bulk_release_units", *scope, limit, reason, actor.name, dry_run, operation
            )
        if len(rows) > limit:  # the statement wrote nothing
            await self._too_many(scope, limit)
        return _result(rows, what, leaving, dry_run, None if dry_run else operation)

    async def _too_many(self, scope: tuple[object, ...], limit: int) -> None:
        row = await self.store.fetchrow("bulk_count_units", *scope)
        count = 0 if row is None else row["matched"]
        raise InvalidInput(
            f"the filter matches {count} units, more than limit {limit}; nothing changed. "
            f"Narrow the filter (domain, state, external_ref_prefix, held_by) or raise limit "
            f"(up to {MAX_LIMIT}) and send it again.",
            invariant="bulk_limit",
            extra={"matched": count, "limit": limit},
        )


def _result(
    rows: list[asyncpg.Record],
    what: str,
    leaving: Sequence[State],
    dry_run: bool,
    operation: uuid.UUID | None,
) -> BulkResult:
    changed, skipped = [], []
    for row in rows:
        state = State(row["from_state"])
        if row["allowed"]:
            to_state = State(row["to_state"])
            changed.append(BulkChanged(row["id"], row["external_ref"], state, to_state))
        else:
            why = _skip_reason(what, row["external_ref"], state, leaving)
            skipped.append(BulkSkipped(row["id"], row["external_ref"], state, SKIP_RULE, why))
    return BulkResult(dry_run, len(rows), changed, skipped, operation)
