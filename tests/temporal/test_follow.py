"""The follower against a real Temporal server: every close kind, both sources, faults."""

from __future__ import annotations

import datetime as dt

from temporal_support import (
    TEMPLATE,
    follower,
    ids,
    register,
    settle,
    start,
    transitions,
    until,
    worker,
)
from temporalio.client import Client

from work_ledger.service import Ledger


async def _states(ledger: Ledger, names: dict[str, str]) -> dict[str, tuple[str, str | None]]:
    found = {}
    for name, workflow_id in names.items():
        unit = (await ledger.get_unit(f"unit-{workflow_id}")).unit
        found[name] = (str(unit.state), unit.disposition and str(unit.disposition))
    return found


EXPECTED = {
    "complete": ("verified", None),
    "plain": ("verified", None),  # the template gives its evidence
    "fail": ("ready", None),
    "timeout": ("ready", None),
    "terminate": ("abandoned", "DEFERRED"),
    "cancel": ("abandoned", "DEFERRED"),
    "continue": ("verified", None),  # the unit follows the newest run, which completed
}


async def test_follower_alone_projects_every_close_kind(
    ledger: Ledger, served, temporal_address: str, namespace: str, database_url: str
) -> None:
    """No plugin: completed, failed, timed out, terminated, cancelled and continued-as-new
    runs reach the README's states; a further pass applies nothing; audit is clean."""
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids(*EXPECTED)
    await register(ledger, *names.values())
    async with worker(client) as queue:
        handles = [await start(client, queue, names[m], m) for m in ("complete", "plain", "fail")]
        handles.append(await start(client, queue, names["continue"], "continue"))
        waiting = {
            m: await start(client, queue, names[m], "wait", **opts)
            for m, opts in (
                ("timeout", {"execution_timeout": dt.timedelta(seconds=2)}),
                ("terminate", {}),
                ("cancel", {}),
            )
        }
        await waiting["terminate"].terminate("operator stopped it")
        await waiting["cancel"].cancel()
        await settle([*handles, *waiting.values()])
    follow = follower(
        client, database_url, served.url, served.projector_token, evidence_url_template=TEMPLATE
    )

    async def converged() -> bool:
        return await _states(ledger, names) == EXPECTED

    await until(converged, follow.run_pass)
    again = await follower(
        client, database_url, served.url, served.projector_token, evidence_url_template=TEMPLATE
    ).run_pass(describe=True)
    assert (again.counts["applied"], again.sent > 0) == (0, True)
    assert await transitions(ledger, names["terminate"]) == [
        "claimed:ready->claimed",
        "transitioned:claimed->in_progress",
        "released:in_progress->ready",
        "disposed:ready->abandoned",
    ]
    assert await ledger.audit() == []
