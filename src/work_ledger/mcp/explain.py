"""Why nothing was claimed, worded so an LLM agent stops, waits or moves on (DESIGN §12).

A claim refused by a budget says whose cap and what was spent, and that retrying cannot
help until an operator raises it; a unit at its attempt limit says a human was asked; a
unit held by prerequisites names them. When pull-next finds nothing, the claim tool looks
once at what the agent could otherwise have got: a ready unit it cannot have (a budget
stops it) or the units waiting and what each waits on.
"""

from __future__ import annotations

import contextlib

from work_ledger.client import AsyncClient, Budget, Waiting
from work_ledger.client.errors import rule_of
from work_ledger.errors import WorkLedgerError

BUDGET_EXHAUSTED = "budget_exhausted"
ATTEMPT_LIMIT_REACHED = "attempt_limit_reached"
PREREQUISITES_UNFINISHED = "prerequisites_unfinished"
# DESIGN §13: an operator's controls. A pause or a cap stops the agent; a held key sends
# it to another unit.
PAUSED = "paused"
CAP_REACHED = "cap_reached"
EXCLUSIVE_KEY_HELD = "exclusive_key_held"
# How many waiting units the claim tool names when nothing is claimable.
SHOWN_WAITING = 5


def exhausted_budget(exc: WorkLedgerError) -> Budget | None:
    """The budget a `budget_exhausted` refusal names (at the top of its body, or under
    `budget`), or None when the refusal is not about a budget or names none."""
    if rule_of(exc) != BUDGET_EXHAUSTED:
        return None
    found = exc.extra.get("budget")
    data = found if isinstance(found, dict) else exc.extra
    if not isinstance(data.get("fleet"), str):
        return None
    return Budget.from_json(data)


def waiting_on(exc: WorkLedgerError) -> list[Waiting]:
    """What a `prerequisites_unfinished` refusal says the unit waits on."""
    found = exc.extra.get("waiting_on")
    items = found if isinstance(found, list) else []
    return [Waiting.from_json(w) for w in items if isinstance(w, dict)]


def budget_stop(budget: Budget | None, detail: str) -> str:
    spent = budget.describe() if budget else detail
    return (
        f"{BUDGET_EXHAUSTED}: {spent}. Nothing in that scope is handed out until an operator "
        "raises the cap (`work-ledger budget set`). Stop claiming: retrying cannot succeed. "
        "Finish, verify or release what you hold, then end your session."
    )


def refusal(exc: WorkLedgerError) -> str | None:
    """The wording for a §12 claim refusal, or None for any other (rendered as usual)."""
    rule = rule_of(exc)
    if rule == BUDGET_EXHAUSTED:
        return budget_stop(exhausted_budget(exc), exc.detail)
    if rule == ATTEMPT_LIMIT_REACHED:
        return (
            f"{ATTEMPT_LIMIT_REACHED}: {exc.detail}. The unit has used up its attempts and "
            "waits for a human's answer; do not retry it. Claim another unit."
        )
    if rule in (PAUSED, CAP_REACHED):
        return (
            f"{rule}: {exc.detail} This is a stop signal from the operator: do not retry "
            "and do not loop on claim. Finish, verify or release what you hold, then end "
            "your session."
        )
    if rule == EXCLUSIVE_KEY_HELD:
        return (
            f"{EXCLUSIVE_KEY_HELD}: {exc.detail} Claim another unit (omit `unit`); do not "
            "wait on this one."
        )
    if rule == PREREQUISITES_UNFINISHED:
        held = "; ".join(w.describe() for w in waiting_on(exc)) or exc.detail
        return (
            f"{PREREQUISITES_UNFINISHED}: the unit waits on {held}. It becomes claimable by "
            "itself when they finish. Claim another unit (omit `unit`), or wait."
        )
    return None


async def nothing_claimable(client: AsyncClient, domain: str | None) -> str:
    """Why pull-next found nothing: the units waiting and what each waits on."""
    where = f" in domain {domain!r}" if domain else ""
    text = f"nothing_to_claim: no unit is claimable{where} right now."
    # A server before DESIGN §12 knows no `waiting` (422): the plain answer will do.
    with contextlib.suppress(WorkLedgerError):
        text += await _waiting(client, domain)
    return text + " Call claim again later, or with wait_seconds (up to 60) to wait for one."


async def _waiting(client: AsyncClient, domain: str | None) -> str:
    page = await client.list_units(state="waiting", domain=domain, limit=SHOWN_WAITING)
    lines = []
    for unit in page.items:
        detail = await client.get_unit(unit.id)
        held = "; ".join(w.describe() for w in detail.waiting_on) or "(nothing listed)"
        lines.append(f"- {unit.external_ref} waits on {held}")
    if not lines:
        return ""
    more = " (and more)" if page.next_cursor else ""
    return (
        f" Units waiting{more}:\n" + "\n".join(lines) + "\n"
        "They become claimable by themselves when what they wait on finishes."
    )
