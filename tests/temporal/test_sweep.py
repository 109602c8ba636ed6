"""The sweep of closed runs walks visibility newest close first and stops at the window's
start: it finds exactly what a CloseTime range filter finds, reading only the pages down
to the window (the range filter makes the SQL stores scan the whole namespace)."""

from __future__ import annotations

import asyncio
import datetime as dt

from temporalio.client import Client

from support.temporal_support import ids, start
from work_ledger.temporal.executions import TemporalReader, visibility_time


async def test_the_sweep_finds_what_the_range_filter_finds_and_stops_at_the_window(
    temporal_address: str, namespace: str
) -> None:
    client = await Client.connect(temporal_address, namespace=namespace)
    names = list(ids(*(f"sweep{i}" for i in range(7))).values())
    handles = [await start(client, "no-worker-needed", w, "wait") for w in names]
    for handle in handles:  # one close after another: seven distinct close times
        await handle.terminate("closing for the sweep test")
        await asyncio.sleep(0.01)
    async with asyncio.timeout(60):  # visibility lists the closes a little later
        while True:
            if (await client.count_workflows("ExecutionStatus = 'Terminated'")).count == 7:
                break
            await asyncio.sleep(0.2)
    listed = client.list_workflows("ExecutionStatus != 'Running'")
    closes = sorted([e.close_time async for e in listed if e.close_time is not None])
    assert len(closes) == 7

    reader = TemporalReader(client, sweep_page_size=2)
    late = closes[-1] + dt.timedelta(seconds=1)
    for lo, hi in ((closes[2], closes[5]), (closes[0], late), (closes[5], late), (late, late)):
        filtered = [
            e.run_id
            async for e in client.list_workflows(
                f"ExecutionStatus != 'Running' AND CloseTime >= '{visibility_time(lo)}' "
                f"AND CloseTime < '{visibility_time(hi)}'"
            )
        ]
        before = reader.rpcs
        swept = [run.run_id for run in await reader.closed_between(lo, hi)]
        assert sorted(swept) == sorted(filtered)
        pages_to_the_window = sum(1 for c in closes if c >= lo) // 2 + 1
        assert reader.rpcs - before == min(pages_to_the_window, 4)  # 4 pages hold all 7
    assert len(await reader.closed_between(closes[2], closes[5])) == 3
