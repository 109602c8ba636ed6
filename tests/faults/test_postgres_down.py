"""PostgreSQL stopped under load: 503 problem+json, bounded response times, self-recovery."""

from __future__ import annotations

import asyncio
import contextlib
import shutil
import signal
import tempfile
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from pathlib import Path

import asyncpg
import httpx
import psutil
import pytest

from support.history import check
from support.served import StartServer, audit, client, mint
from support.workload import Chaos, Workload
from work_ledger.db.connect import connect, ensure_database, with_database
from work_ledger.embedded.server import embedded_server_url, pg_ctl
from work_ledger.runtime import migrate_database
from work_ledger.service.tokens import Role

pytestmark = pytest.mark.faults
PROBLEM = "application/problem+json"
DOWN_SECONDS = 3.0
MAX_RESPONSE_SECONDS = 20.0  # readyz gives up after 2 s; nothing may hang 10x longer
FROZEN_TIMEOUT = 1.0  # WL_STATEMENT_TIMEOUT of the frozen test's server


@dataclass
class Postgres:
    """A PostgreSQL of this test's own (embedded), stopped and started with its pg_ctl."""

    pgdata: Path
    url: str

    def _pg_ctl(self, *args: str) -> None:
        pg_ctl(self.pgdata, *args)  # as the data dir's owner when run as root

    async def stop(self) -> None:
        await asyncio.to_thread(self._pg_ctl, "-w", "-m", "fast", "stop")

    async def start(self) -> None:
        socket_dir = self.url.rsplit("host=", 1)[1].split("&")[0]
        args = ("-w", "-o", '-h ""', "-o", f"-k {socket_dir}", "-l", str(self.pgdata / "log"))
        await asyncio.to_thread(self._pg_ctl, *args, "start")

    @contextlib.contextmanager
    def frozen(self) -> Iterator[None]:
        """SIGSTOP the server and its backends (a hung host, a partition), SIGCONT after."""
        pid = int((self.pgdata / "postmaster.pid").read_text().split()[0])
        main = psutil.Process(pid)
        processes = [main, *main.children(recursive=True)]
        for process in processes:
            process.send_signal(signal.SIGSTOP)
        try:
            yield
        finally:
            for process in processes:
                with contextlib.suppress(psutil.NoSuchProcess):
                    process.send_signal(signal.SIGCONT)


@pytest.fixture(scope="module")
async def stoppable() -> AsyncIterator[Postgres]:
    """One PostgreSQL for this module, stopped for good at the end."""
    # Not under pytest's folders: a concurrent pytest run chmods those, which would cut a
    # root-run server's OS user off its data (embedded/owner.py).
    home = Path(tempfile.mkdtemp(prefix="wl-stoppable-"))
    admin = await asyncio.to_thread(embedded_server_url, home / "pg")
    server = Postgres(home / "pg" / "pgdata", admin)
    yield server
    with contextlib.suppress(Exception):
        await server.stop()
    shutil.rmtree(home, ignore_errors=True)


@pytest.fixture
async def postgres(stoppable: Postgres) -> Postgres:
    """A migrated database of this test's own on the stoppable server."""
    name = f"faults_{uuid.uuid4().hex[:8]}"
    await ensure_database(stoppable.url, name)
    url = with_database(stoppable.url, name)
    await migrate_database(url)
    return Postgres(stoppable.pgdata, url)


@dataclass
class Probe:
    path: str
    status: int | None
    content_type: str
    seconds: float
    detail: str = ""


async def _probe(
    http: httpx.AsyncClient, method: str, path: str, within: float = 30, **kw: object
) -> Probe:
    started = time.monotonic()
    try:
        response = await http.request(method, path, timeout=within, **kw)  # type: ignore[arg-type]
        status, kind = response.status_code, response.headers.get("content-type", "")
        detail = response.json().get("detail", "") if kind.startswith(PROBLEM) else ""
    except httpx.HTTPError:
        status, kind, detail = None, "", ""
    return Probe(path, status, kind, time.monotonic() - started, detail)


async def _probe_while_down(url: str, agent: str, reader: str, stop: asyncio.Event) -> list[Probe]:
    """Readiness, a read and a write, over and over, each on a fresh connection."""
    probes: list[Probe] = []
    async with client(url, agent) as writer, client(url, reader) as read:
        while not stop.is_set():
            probes += await asyncio.gather(
                _probe(read, "GET", "/readyz"),
                _probe(read, "GET", "/units"),
                _probe(writer, "POST", "/units/claim", json={"lease_seconds": 5}),
                _probe(read, "GET", "/units/no-such-unit/events"),
            )
            await asyncio.sleep(0.2)
    return probes


async def test_postgres_down_answers_503_then_recovers(
    start_server: StartServer, postgres: Postgres, tmp_path: Path
) -> None:
    """While PostgreSQL is stopped: 503 problem+json in bounded time; back up: work resumes."""
    server = await start_server(postgres.url)
    names = [f"pg-agent-{i}" for i in range(6)]
    operator, triage, reader, prober, *tokens = await mint(
        postgres.url,
        [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage"), (Role.READER, "reader")]
        + [(Role.AGENT, "prober")]
        + [(Role.AGENT, n) for n in names],
    )
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"pg-{i}", "fleet": "f"} for i in range(200)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    chaos = Chaos(client_timeout=0.0, die=0.0, refused=0.1, duplicate=0.1, block=0.1)
    workload = Workload(server.url, dict(zip(names, tokens, strict=True)), triage, chaos=chaos)
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(2.0)

    await postgres.stop()
    down_at = time.monotonic()
    stop_probing = asyncio.Event()
    probing = asyncio.create_task(_probe_while_down(server.url, prober, reader, stop_probing))
    await asyncio.sleep(DOWN_SECONDS)
    stop_probing.set()
    down = await probing
    restart_at = time.monotonic()
    await postgres.start()
    recovered_in = await server.wait_ready(within=30)
    back_at = time.monotonic()
    async with asyncio.timeout(60):  # the agents get back to work by themselves
        while not [op for op in workload.recorder.ops if op.started > back_at and op.acked]:  # noqa: ASYNC110
            await asyncio.sleep(0.1)
    workload.stop.set()
    await load

    during = [
        op for op in workload.recorder.ops if down_at <= op.started and op.ended <= restart_at
    ]
    after = [op for op in workload.recorder.ops if op.started > back_at and op.acked]
    statuses = sorted({p.status for p in down if p.status is not None})
    worst = max([p.seconds for p in down] + [op.seconds for op in during])
    print(
        f"\nwhile down: {len(down)} probes and {len(during)} agent requests, statuses "
        f"{statuses}, slowest {worst:.2f}s; ready again {recovered_in:.2f}s after restart; "
        f"{len(after)} writes acknowledged after"
    )
    assert down
    assert all(p.status == 503 for p in down), statuses
    assert all(p.content_type.startswith(PROBLEM) for p in down)
    assert {op.status for op in during if op.kind != "read"} <= {None, 503}, during
    assert not [op for op in workload.recorder.ops if op.status in (500, 502, 504)]
    assert worst < MAX_RESPONSE_SECONDS
    assert after, "the agents did not get back to work once PostgreSQL was back"

    conn: asyncpg.Connection = await connect(postgres.url)
    try:
        report = await check(conn, workload.recorder)
    finally:
        await conn.close()
    code, out = await audit(server.env)
    print(f"{report.summary()}\naudit: {out}")
    assert report.violations == []
    assert code == 0, out


async def test_postgres_frozen_answers_503_and_writes_nothing(
    start_server: StartServer, postgres: Postgres
) -> None:
    """PostgreSQL hung (SIGSTOP): /readyz, a read and a keyed write answer 503 once
    WL_STATEMENT_TIMEOUT runs out; after the thaw the write is not in the ledger, and its
    retry with the same Idempotency-Key writes it once."""
    server = await start_server(postgres.url, WL_STATEMENT_TIMEOUT=str(FROZEN_TIMEOUT))
    [operator] = await mint(postgres.url, [(Role.OPERATOR, "frozen-op")])
    unit = {"units": [{"external_ref": "written-while-frozen", "fleet": "f"}]}
    key = {"Idempotency-Key": "frozen-write"}
    async with client(server.url, operator) as http:
        # Every pool connection has run the write before, so it is one round trip away.
        warm = [{"units": [{"external_ref": f"warm-{i}", "fleet": "f"}]} for i in range(8)]
        warmed = await asyncio.gather(
            *(
                http.post("/units", json=w, headers={"Idempotency-Key": f"w{i}"})
                for i, w in enumerate(warm)
            )
        )
        assert {r.status_code for r in warmed} == {200}
        with postgres.frozen():
            ready, read, write = await asyncio.gather(
                _probe(http, "GET", "/readyz", within=MAX_RESPONSE_SECONDS),
                _probe(http, "GET", "/units", within=MAX_RESPONSE_SECONDS),
                _probe(http, "POST", "/units", within=MAX_RESPONSE_SECONDS, json=unit, headers=key),
            )
        assert (ready.status, read.status, write.status) == (503, 503, 503)
        assert write.content_type.startswith(PROBLEM)
        assert "Idempotency-Key" in write.detail, write.detail
        await server.wait_ready(within=30)
        after = await http.get("/units/written-while-frozen")
        assert after.status_code == 404, after.text
        retry = await http.post("/units", json=unit, headers=key)
    assert (retry.status_code, retry.json()["created"]) == (200, 1), retry.text
    assert "idempotent-replayed" not in retry.headers
