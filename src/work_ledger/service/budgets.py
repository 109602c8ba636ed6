"""Budgets (DESIGN §12): a cap on what a fleet, or one domain of it, may spend.

The claim itself refuses work in a spent scope (wl_budget_open in migration 0011); this
module sets and lists the caps. What a scope has spent is the sum of its units' cost,
kept in shard rows (scope_spend) so that many agents recording cost into one scope do
not queue on one row.
"""

from __future__ import annotations

from dataclasses import dataclass

from work_ledger.db.store import Store
from work_ledger.domain.model import Actor
from work_ledger.errors import InvalidInput
from work_ledger.service.reads import LedgerReads

MAX_CAP_CENTS = 10**15


@dataclass(frozen=True, slots=True)
class Budget:
    fleet: str
    domain: str | None
    cap_cents: int
    spent_cents: int
    remaining_cents: int


class BudgetWrites(LedgerReads):
    """Set and list budgets; a base of `Ledger`."""

    store: Store

    async def set_budget(
        self, fleet: str, cap_cents: int, actor: Actor, *, domain: str | None = None
    ) -> Budget:
        """Create or update the budget of a fleet (domain None) or of one of its domains.
        Raising a cap wakes the long-polls of the scope's domains."""
        if isinstance(cap_cents, bool) or not 0 <= cap_cents <= MAX_CAP_CENTS:
            raise InvalidInput(
                f"cap_cents must be a whole number of cents 0..{MAX_CAP_CENTS}, not {cap_cents!r}"
            )
        row = await self.store.fetchrow("upsert_budget", fleet, domain, cap_cents, actor.name)
        assert row is not None  # an upsert always answers
        return Budget(**dict(row))

    async def list_budgets(self) -> list[Budget]:
        rows = await self.store.fetch("list_budgets")
        return [Budget(**dict(row)) for row in rows]
