"""Behind PgBouncer in transaction mode: two replicas, the CLI, long-polls and the history.

PgBouncer (Debian's, started here) lends `POOL` server connections to many more clients,
so consecutive transactions of one client run on different servers. WL_DATABASE_URL goes
through it; WL_DIRECT_DATABASE_URL reaches PostgreSQL itself, for LISTEN and migrations.
Skips, saying so, where pgbouncer is not installed.
"""

from __future__ import annotations

import asyncio
import tempfile
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import pytest

from support.history import Report, check
from support.pgbouncer import Bouncer, pgbouncer_program, start_bouncer
from support.pgcluster import Node, build_single, remove
from support.served import Served, cli, cli_token, client, ledger_env, mint
from support.workload import Chaos, Op, Recorder, Workload
from work_ledger.db.connect import connect, ensure_database
from work_ledger.embedded.programs import program
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
POOL = 3  # server connections PgBouncer lends: fewer than the replicas' pools and clients
WAITERS = 10
AGENTS = 8
SECONDS = 6.0


@dataclass
class Bounced:
    node: Node
    bouncer: Bouncer

    def env(self, home: Path, **extra: str) -> dict[str, str]:
        """A replica's environment: pooled WL_DATABASE_URL, direct WL_DIRECT_DATABASE_URL."""
        home.mkdir(parents=True, exist_ok=True)
        direct = {"WL_DIRECT_DATABASE_URL": self.node.url("ledger")}
        return ledger_env(self.bouncer.url("ledger"), home, **{**direct, **extra})


@pytest.fixture(scope="module")
def bounced() -> Iterator[Bounced]:
    """A PostgreSQL (the wheel's) with an empty `ledger` database, behind PgBouncer."""
    if pgbouncer_program() is None:
        pytest.skip("pgbouncer is not installed: apt-get install pgbouncer")
    base = Path(tempfile.mkdtemp(prefix="wl-bouncer-"))
    node = build_single(base, program("initdb").parent)
    asyncio.run(ensure_database(node.url(), "ledger"))
    bouncer = start_bouncer(base / "pgbouncer", node.port, pool_size=POOL)
    yield Bounced(node, bouncer)
    bouncer.stop()
    node.stop()
    remove(base)


@pytest.fixture
async def replicas(bounced: Bounced, tmp_path: Path) -> AsyncIterator[list[Served]]:
    """Two `serve` replicas behind PgBouncer."""
    started = [
        Served(bounced.env(tmp_path / f"replica-{i}"), tmp_path / f"replica-{i}") for i in (0, 1)
    ]
    await asyncio.gather(*(s.start() for s in started))
    yield started
    for served in started:
        served.stop()


async def _long_polls_all_woken(a: Served, b: Served, op: str, agents: list[str]) -> None:
    """WAITERS claims long-poll on both replicas with nothing claimable; registering as many
    units hands every waiter one (no wake-up lost)."""
    async with client(a.url, op, timeout=60) as operator:
        waiting = []
        for i, token in enumerate(agents):
            http = client((a, b)[i % 2].url, token, timeout=60)
            body = {"domain": "poll", "wait_seconds": 40}
            waiting.append((http, asyncio.create_task(http.post("/units/claim", json=body))))
        await asyncio.sleep(1.5)
        assert not any(task.done() for _, task in waiting)  # nothing to give: they wait
        units = [
            {"external_ref": f"poll-{i}", "fleet": "f", "domain": "poll"}
            for i in range(len(agents))
        ]
        assert (await operator.post("/units", json={"units": units})).status_code == 200
        answers = [await task for _, task in waiting]
        for http, _ in waiting:
            await http.aclose()
    got = [r.json()["unit"] for r in answers]
    assert [r.status_code for r in answers] == [200] * len(agents)
    assert None not in got, "a waiter timed out with units claimable: a lost wake-up"
    assert len({u["id"] for u in got}) == len(agents)


async def test_behind_pgbouncer_two_replicas_the_cli_and_long_polls_keep_every_promise(
    bounced: Bounced, replicas: list[Served], tmp_path: Path
) -> None:
    """Through PgBouncer (transaction mode, POOL server connections): a workload on two
    replicas leaves a clean history, no 5xx but 503s, and a clean audit; `token create`,
    `register` and `claim` work; every long-poll waiter is woken."""
    a, b = replicas
    env = bounced.env(tmp_path / "cli")
    op = await cli_token(env, Role.OPERATOR, "op")  # token create, through PgBouncer
    names = [f"bounce-{i}" for i in range(AGENTS)] + [f"poll-{i}" for i in range(WAITERS)]
    triage, *tokens = await mint(
        bounced.node.url("ledger"), [(Role.TRIAGE, "triage")] + [(Role.AGENT, n) for n in names]
    )
    report, failed = await _history_on_both(replicas, op, triage, names[:AGENTS], tokens[:AGENTS])
    code, audited = await cli(env, "audit")
    print(f"\nbehind PgBouncer (pool {POOL}):\n{report.summary()}\n5xx: {len(failed)}")
    assert report.violations == []
    assert report.acked > 50
    assert report.refusals["unauthorized"] == 0  # every token minted before was honoured
    assert [op.status for op in failed if op.status != 503] == []
    assert code == 0, audited

    agent = await cli_token(env, Role.AGENT, "cli-agent")
    (tmp_path / "units.csv").write_text("external_ref,fleet,domain\ncli-1,f,cli\n")
    on_a = {**env, "WL_URL": a.url, "WL_TOKEN": op}
    code, out = await cli(on_a, "register", str(tmp_path / "units.csv"))
    assert code == 0, out
    on_b = {**env, "WL_URL": b.url, "WL_TOKEN": agent}
    code, out = await cli(on_b, "claim", "--domain", "cli", "--json")
    assert code == 0, out
    assert "cli-1" in out
    await _long_polls_all_woken(a, b, op, tokens[AGENTS:])


async def _history_on_both(
    replicas: list[Served], op: str, triage: str, names: list[str], tokens: list[str]
) -> tuple[Report, list[Op]]:
    """Agents split over both replicas for SECONDS; the history's report and its 5xx."""
    async with client(replicas[0].url, op, timeout=30) as operator:
        units = [{"external_ref": f"hist-{i}", "fleet": "f"} for i in range(200)]
        assert (await operator.post("/units", json={"units": units})).status_code == 200
    recorder = Recorder()
    pairs = list(zip(names, tokens, strict=True))
    loads = [
        Workload(served.url, dict(pairs[i::2]), triage, recorder=recorder, chaos=Chaos(die=0.02))
        for i, served in enumerate(replicas)
    ]
    await asyncio.gather(*(w.run(SECONDS) for w in loads))
    conn: asyncpg.Connection = await connect(replicas[0].env["WL_DIRECT_DATABASE_URL"])
    try:
        report = await check(conn, recorder)
    finally:
        await conn.close()
    refused = [op.response for op in recorder.ops if op.status == 401]
    print(f"401s: {refused[:3]}")  # a valid token refused: what the server said
    return report, [op for op in recorder.ops if op.status is not None and op.status >= 500]


@pytest.mark.parametrize("direct", [False, True], ids=["no-direct-url", "direct-url-pooled"])
async def test_listening_through_a_transaction_pooler_is_refused_at_start_naming_the_fix(
    bounced: Bounced, tmp_path: Path, direct: bool
) -> None:
    """`serve` and `migrate` with their LISTEN/migration URL on PgBouncer (transaction mode)
    refuse to start, naming WL_DIRECT_DATABASE_URL, instead of losing wake-ups silently."""
    extra = {"WL_DIRECT_DATABASE_URL": bounced.bouncer.url("ledger")} if direct else {}
    env = ledger_env(bounced.bouncer.url("ledger"), tmp_path, **extra)
    code, out = await cli(env, "migrate")
    said = " ".join(out.split())
    assert code == 1, out
    assert "did not hear its own NOTIFY" in said
    assert "Set WL_DIRECT_DATABASE_URL" in said
    variable = "WL_DIRECT_DATABASE_URL" if direct else "WL_DATABASE_URL"
    assert f"LISTEN on {variable}" in said

    served = Served(env, tmp_path)
    served.spawn()
    assert served.proc is not None
    assert await asyncio.to_thread(served.proc.wait, 60) != 0
    assert "Set WL_DIRECT_DATABASE_URL" in " ".join(served.log_tail(60).split())
