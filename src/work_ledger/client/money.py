"""The fleet's money: an attempt's cost by model, a cost record to send, and budgets."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from work_ledger.client._parse import build


@dataclass(frozen=True, slots=True)
class ModelCost:
    """An attempt's cost records of one model, summed (model None: records without one)."""

    model: str | None = None
    cost_cents: int = 0
    estimated_cents: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_tokens: int = 0
    cache_write_tokens: int = 0

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ModelCost:
        return build(cls, data)


@dataclass(frozen=True, slots=True)
class Budget:
    """A fleet's budget (domain None), or one domain's of it, with what its units spent."""

    fleet: str
    domain: str | None = None
    cap_cents: int = 0
    spent_cents: int = 0
    remaining_cents: int | None = None

    @property
    def exhausted(self) -> bool:
        return self.spent_cents >= self.cap_cents

    @property
    def used_percent(self) -> float | None:
        return None if self.cap_cents == 0 else 100 * self.spent_cents / self.cap_cents

    def describe(self) -> str:
        scope = f"fleet {self.fleet}" + (f" domain {self.domain}" if self.domain else "")
        return f"the budget of {scope}: {self.spent_cents} of {self.cap_cents} cents spent"

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Budget:
        found = data["budget"] if isinstance(data.get("budget"), dict) else data
        budget = build(cls, found)
        if budget.remaining_cents is None:
            remaining = max(0, budget.cap_cents - budget.spent_cents)
            budget = dataclasses.replace(budget, remaining_cents=remaining)
        return budget


@dataclass(frozen=True, slots=True)
class CostRecord:
    """One cost record of an attempt: cents (>= 0) and, optionally, the model and its tokens.
    `estimated`: the cents are a client-side list-price estimate, not a bill."""

    cost_cents: int
    model: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_write_tokens: int | None = None
    estimated: bool = False
    # The session's totals for the model, spend its telemetry already reported included
    # (Claude Code's result): the ledger records only what they add above it (DESIGN §13).
    includes_telemetry: bool = False

    @property
    def empty(self) -> bool:
        """Nothing to record (0 cents, no tokens): the server refuses it (422)."""
        tokens = (
            self.input_tokens,
            self.output_tokens,
            self.cache_read_tokens,
            self.cache_write_tokens,
        )
        return self.cost_cents == 0 and not any(tokens)

    def to_json(self) -> dict[str, Any]:
        body = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        # `estimated` false is the default: left out, as every unset field, so a record of
        # cents alone reads as before DESIGN §12.
        if not self.estimated:
            body.pop("estimated")
        if not self.includes_telemetry:
            body.pop("includes_telemetry")
        return body
