"""The follower against a real Temporal server: every close kind, both sources, faults."""

from __future__ import annotations

import asyncio
import datetime as dt

import pytest
from temporalio.client import Client

from support.ports import free_port
from support.temporal_support import (
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
from work_ledger.service.ledger import Ledger
from work_ledger.temporal.checkpoint import FollowState
from work_ledger.temporal.forwarder import ForwardUnavailable


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


START = ["claimed:ready->claimed", "transitioned:claimed->in_progress"]
TRANSITIONS = {
    "complete": [*START, "transitioned:in_progress->verified"],
    "plain": [*START, "transitioned:in_progress->verified"],
    "fail": [*START, "released:in_progress->ready"],
    "timeout": [*START, "released:in_progress->ready"],
    "terminate": [*START, "released:in_progress->ready", "disposed:ready->abandoned"],
    "cancel": [*START, "released:in_progress->ready", "disposed:ready->abandoned"],
    "continue": [*START, "transitioned:in_progress->verified"],
}


@pytest.mark.parametrize("plugin", [False, True], ids=["follower-alone", "plugin-and-follower"])
async def test_every_close_kind_reaches_its_state_each_transition_once(
    ledger: Ledger,
    served,
    temporal_address: str,
    namespace: str,
    database_url: str,
    plugin: bool,
) -> None:
    """Completed, failed, timed out, terminated, cancelled and continued-as-new runs reach
    the README's states through the follower alone, or with the worker plugin projecting
    first (the follower's same steps are then duplicates); each transition is in the log
    once, a further pass applies nothing, and the audit is clean."""
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids(*EXPECTED)
    await register(ledger, *names.values())
    source = {"url": served.url, "token": served.projector_token} if plugin else {}
    async with worker(client, **source) as queue:
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
        if plugin:  # the plugin projects the starts before these runs end
            for m in ("terminate", "cancel"):
                await until(lambda m=m: _held(ledger, names[m]), lambda: asyncio.sleep(0))
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
    for kind, workflow_id in names.items():
        assert (kind, await transitions(ledger, workflow_id)) == (kind, TRANSITIONS[kind])
    assert await ledger.audit() == []


async def _held(ledger: Ledger, workflow_id: str) -> bool:
    return (await ledger.get_unit(f"unit-{workflow_id}")).unit.state == "in_progress"


async def test_follower_converges_after_the_ledger_was_down(
    ledger: Ledger, served, temporal_address: str, namespace: str, database_url: str
) -> None:
    """Runs close while the ledger is unreachable: the pass fails, the checkpoint stays
    where it was, and once the ledger is back every unit reflects its run."""
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids("complete", "fail")
    await register(ledger, *names.values())
    async with worker(client) as queue:
        await settle([await start(client, queue, names[m], m) for m in names])
    down = follower(client, database_url, f"http://127.0.0.1:{free_port()}", "wl_x_y")
    with pytest.raises(ForwardUnavailable):
        await down.run_pass()
    assert await FollowState(database_url).checkpoint(namespace) is None
    back = follower(client, database_url, served.url, served.projector_token)

    async def converged() -> bool:
        return await _states(ledger, names) == {
            "complete": ("verified", None),
            "fail": ("ready", None),
        }

    await until(converged, back.run_pass)
    assert await FollowState(database_url).checkpoint(namespace) is not None
    assert await ledger.audit() == []


class _KilledBeforeCheckpoint(FollowState):
    async def advance(self, namespace: str, swept_until: dt.datetime) -> dt.datetime:
        raise SystemExit("killed between the ingest and the checkpoint")


async def test_follower_killed_before_its_checkpoint_applies_nothing_twice(
    ledger: Ledger, served, temporal_address: str, namespace: str, database_url: str
) -> None:
    """A follower dies after the ledger took its events but before its checkpoint moved:
    the next one sweeps the same window again, every event a duplicate, each transition
    in the log once."""
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids("complete")
    await register(ledger, *names.values())
    async with worker(client) as queue:
        await settle([await start(client, queue, names["complete"], "complete")])
    dying = follower(client, database_url, served.url, served.projector_token)
    dying.state = _KilledBeforeCheckpoint(database_url)

    async def verified() -> bool:
        return (await _states(ledger, names))["complete"] == ("verified", None)

    async def pass_then_die() -> None:
        with pytest.raises(SystemExit):
            await dying.run_pass()

    await until(verified, pass_then_die)
    assert await FollowState(database_url).checkpoint(namespace) is None
    restarted = await follower(client, database_url, served.url, served.projector_token).run_pass()
    assert (restarted.counts["applied"], restarted.counts["duplicates"]) == (0, 2)
    assert await FollowState(database_url).checkpoint(namespace) == restarted.hi
    assert await transitions(ledger, names["complete"]) == [
        "claimed:ready->claimed",
        "transitioned:claimed->in_progress",
        "transitioned:in_progress->verified",
    ]
    assert await ledger.audit() == []


async def test_describe_finds_a_close_outside_every_window(
    ledger: Ledger, served, temporal_address: str, namespace: str, database_url: str
) -> None:
    """A run closes before the checkpoint (as when visibility indexes a close later than
    the overlap): no sweep sees it, the describe of the held unit does."""
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids("late")
    await register(ledger, names["late"])
    async with worker(client) as queue:
        handle = await start(client, queue, names["late"], "wait")
        first = follower(client, database_url, served.url, served.projector_token)
        await until(lambda: _held(ledger, names["late"]), first.run_pass)
        await handle.terminate("closed while the follower looked away")
        await settle([handle])
    await FollowState(database_url).advance(namespace, dt.datetime.now(dt.UTC))
    blind = follower(client, database_url, served.url, served.projector_token, overlap=0.0)
    swept = await blind.run_pass(describe=False)
    assert (swept.sent, await _states(ledger, names)) == (0, {"late": ("in_progress", None)})
    described = await blind.run_pass(describe=True)
    assert (described.described, described.counts["applied"]) == (1, 1)
    assert await _states(ledger, names) == {"late": ("abandoned", "DEFERRED")}
    assert await ledger.audit() == []
