"""A rolling upgrade under load: the expand/contract rule of docs/postgresql.md, proven.

Two replicas of this release serve a history-checked workload while the next release's
migration (a test-only one that follows the rule: a nullable column, a defaulted column, a
new table, an enum value appended, an index) is applied, as `work-ledger migrate` would;
then replicas started with `--no-migrate` roll in one by one, each replacing an old one
the way a draining load balancer would. Nothing may fail but 503s, the history must hold,
and the audit must pass.
"""

from __future__ import annotations

import asyncio
import collections
import itertools

import asyncpg
import httpx
import pytest

from support.history import check
from support.served import Served, StartServer, audit, mint_fleet
from support.workload import Chaos, Recorder, Workload
from work_ledger.db.migrate import Migration, apply_migrations, load_migrations

pytestmark = pytest.mark.faults
AGENTS = 8
NEXT = Migration(
    9999,
    "next_release_expands",
    """
    ALTER TABLE work_units ADD COLUMN review_note text;
    ALTER TABLE work_unit_attempts ADD COLUMN tokens_used bigint NOT NULL DEFAULT 0;
    ALTER TABLE blocking_questions ADD COLUMN asked_via text DEFAULT 'api';
    CREATE TABLE wl_review_notes (
        unit_id uuid NOT NULL REFERENCES work_units (id), note text NOT NULL,
        created_at timestamptz NOT NULL DEFAULT now());
    ALTER TYPE work_event_type ADD VALUE 'reviewed';
    CREATE INDEX work_units_review_note ON work_units (review_note) WHERE review_note IS NOT NULL;
    """,
)


class Fleet(httpx.AsyncBaseTransport):
    """Sends each request to the next replica of `live` (shared, changed as replicas roll),
    and a refused connection to the one after: a load balancer that drains replicas."""

    turns = itertools.count()

    def __init__(self, live: list[str], answered: collections.Counter[str]) -> None:
        self.live, self.answered = live, answered
        self.inner = httpx.AsyncHTTPTransport(retries=0)

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        for _ in range(200):  # 10 s: a loaded machine may be slow to accept
            url = httpx.URL(self.live[next(self.turns) % len(self.live)])
            request.url = request.url.copy_with(host=url.host, port=url.port)
            try:
                response = await self.inner.handle_async_request(request)
            except httpx.ConnectError:
                await asyncio.sleep(0.05)
                continue
            self.answered[str(url)] += 1
            return response
        raise httpx.ConnectError("no replica accepted the connection", request=request)

    async def aclose(self) -> None:
        await self.inner.aclose()


async def test_replicas_of_this_release_keep_serving_while_the_next_one_migrates_and_rolls_in(
    start_server: StartServer, database_url: str, raw: asyncpg.Connection
) -> None:
    """The next release's migration applied under load, then new replicas (--no-migrate)
    replace the old ones one by one: no 5xx but 503s, no history violation, audit clean."""
    old = [await start_server(), await start_server()]
    names = [f"roll-{i}" for i in range(AGENTS)]
    operator, triage, agents = await mint_fleet(database_url, names)
    live = [s.url for s in old]
    answered: collections.Counter[str] = collections.Counter()
    async with httpx.AsyncClient(
        base_url=live[0], headers={"Authorization": f"Bearer {operator}"}
    ) as op:
        units = [{"external_ref": f"roll-{i}", "fleet": "f"} for i in range(300)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    workload = Workload(
        live[0],
        agents,
        triage,
        chaos=Chaos(die=0.02),
        transport=lambda _: Fleet(live, answered),
    )
    load = asyncio.create_task(workload.run())
    await asyncio.sleep(2.0)
    # The next release's `work-ledger migrate`, while this release's replicas serve.
    assert [
        m.version for m in await apply_migrations(raw, migrations=[*load_migrations(), NEXT])
    ] == [9999]
    new: list[Served] = []
    for replaced in old:
        await asyncio.sleep(1.5)
        new.append(await start_server(serve_args=("--no-migrate",)))
        live.append(new[-1].url)
        live.remove(replaced.url)  # drained: no new request goes there
        await asyncio.sleep(0.5)
        replaced.stop()  # SIGTERM: uvicorn finishes what it holds
    await asyncio.sleep(2.0)
    workload.stop.set()
    recorder: Recorder = await load
    report = await check(raw, recorder)
    code, audited = await audit(new[0].env)
    failed = [op for op in recorder.ops if op.status is not None and op.status >= 500]
    on_new = sum(answered[s.url] for s in new)
    print(
        f"\nrolling upgrade: {report.summary()}\nanswered by the new replicas: {on_new}, "
        f"by the old: {sum(answered[s.url] for s in old)}; 5xx: {len(failed)}"
    )
    refused = [op.response for op in recorder.ops if op.status == 401]
    print(f"401s: {refused[:3]}")  # a valid token refused: what the server said
    assert report.violations == []
    assert [op.status for op in failed if op.status != 503] == []
    assert on_new > 20
    assert code == 0, audited
