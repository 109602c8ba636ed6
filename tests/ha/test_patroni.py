"""Patroni with etcd, three members, synchronous_mode: the ledger through a failover.

Opt-in (about five minutes): `WL_HA_TESTS=1 uv run pytest -n 0 -m ha tests/ha`, as root,
with etcd, PostgreSQL 15 and a Patroni virtualenv installed (docs/high-availability.md).
Each test starts its own cluster from deploy/patroni/patroni.yml, puts `work-ledger
serve` in front of it on the members' multi-host URL, and injects one fault under the
history-checked workload. Goals (issue 31): nothing acknowledged lost; the first 2xx
within ttl + 10 s of the fault; only 503s in between, never a 500 and never a hang.
"""

from __future__ import annotations

import asyncio
import os
import tempfile
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from support.ha_load import Outcome, run_fault
from support.patroni import Cluster, Member, Timing, etcd_raft_leader, missing, start_cluster
from support.served import StartServer
from work_ledger.db.connect import ensure_database, with_database
from work_ledger.runtime import migrate_database

SKIP = None if os.environ.get("WL_HA_TESTS") == "1" else "opt-in: set WL_HA_TESTS=1"
pytestmark = [
    pytest.mark.ha,
    pytest.mark.skipif(bool(SKIP or missing()), reason=str(SKIP or missing())),
    pytest.mark.timeout(600),
]
DATABASE = "ledger"
# The settings docs/high-availability.md gives; WL_HA_TIMING="ttl,loop_wait,retry_timeout"
# runs the suite with others (how the figures there were compared).
TIMING = Timing(*(int(v) for v in os.environ.get("WL_HA_TIMING", "20,2,5").split(",")))
# The ledger answers within its statement timeout or says 503; longer is a hang.
HANG_SECONDS = 12.0


@pytest.fixture
async def cluster() -> AsyncIterator[Cluster]:
    base = Path(tempfile.mkdtemp(prefix="wl-ha-"))
    made = await asyncio.to_thread(start_cluster, base, TIMING)
    try:
        admin = made.url("postgres")
        await ensure_database(admin, DATABASE)
        await migrate_database(with_database(admin, DATABASE))
        yield made
    finally:
        await asyncio.to_thread(made.stop)


def _held_to_the_goals(outcome: Outcome, bound: float) -> None:
    print(f"\n{outcome.summary()}")
    assert outcome.lost == []
    assert outcome.report.violations == []
    assert outcome.audit_code == 0, outcome.audit_out
    assert {s for s in outcome.statuses if s is None or s >= 500} == {503}, outcome.statuses
    assert outcome.report.no_answer == 0  # every request got an answer: no hang
    assert outcome.slowest < HANG_SECONDS
    assert outcome.first_2xx < bound
    assert outcome.acked_after > 0


async def test_leader_killed_loses_nothing(cluster: Cluster, start_server: StartServer) -> None:
    """SIGKILL of the leader's Patroni and PostgreSQL: the sync standby takes over within
    ttl + 10 s, nothing acknowledged is lost, and the old leader rejoins."""
    killed: list[Member] = []
    outcome = await run_fault(
        cluster, DATABASE, start_server, lambda: killed.append(cluster.kill_leader()), "kill"
    )
    _held_to_the_goals(outcome, TIMING.ttl + 10)
    assert outcome.first_failure is not None
    cluster.restart(killed[0])
    await asyncio.to_thread(cluster.wait_healthy)


async def test_switchover_loses_nothing(cluster: Cluster, start_server: StartServer) -> None:
    """`patronictl switchover --force` under load: writes again within seconds, none lost."""
    before = cluster.leader()

    def switch() -> None:
        done = cluster.switchover()
        assert done.returncode == 0, done.stdout + done.stderr

    outcome = await run_fault(cluster, DATABASE, start_server, switch, "switchover")
    _held_to_the_goals(outcome, 10.0)
    assert cluster.leader() not in (None, before)


async def test_leader_cut_from_etcd_loses_nothing(
    cluster: Cluster, start_server: StartServer
) -> None:
    """The leader's etcd member frozen (a cut link): the leader demotes itself once it
    cannot renew its key, the sync standby is elected, nothing acknowledged is lost."""
    leader = cluster.leader()
    assert leader is not None
    raft_leader = etcd_raft_leader(leader.etcd)

    def cut() -> None:
        cluster.cut_from_dcs(leader)
        cluster.wait_new_leader(leader)

    try:
        outcome = await run_fault(cluster, DATABASE, start_server, cut, "etcd cut")
    finally:
        cluster.heal(leader)
    print(f"the frozen etcd member led etcd's Raft group: {raft_leader}")
    # etcd's new Raft leader renews every lease when it takes over, so a cut of etcd's own
    # leader keeps the dead leader's key up to one more ttl (measured: 30.8 s at ttl 20).
    _held_to_the_goals(outcome, 2 * TIMING.ttl + 10)
    assert cluster.leader() not in (None, leader)


async def test_leader_killed_behind_haproxy_loses_nothing(
    cluster: Cluster, start_server: StartServer
) -> None:
    """The same kill with the ledger on HAProxy (deploy/haproxy/haproxy.cfg), which sends it
    to whichever member answers Patroni's GET /primary with 200."""
    url = cluster.start_haproxy(DATABASE)
    outcome = await run_fault(
        cluster, DATABASE, start_server, cluster.kill_leader, "kill behind HAProxy", url=url
    )
    _held_to_the_goals(outcome, TIMING.ttl + 10)
