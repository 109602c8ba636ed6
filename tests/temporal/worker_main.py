"""A worker process with the work-ledger plugin, for the tests that kill one.

    python worker_main.py ADDRESS NAMESPACE TASK_QUEUE   (WL_URL, WL_TOKEN in the environment)

No workflow is cached (max_cached_workflows=0): every workflow task replays the history
from the start, as a freshly restarted worker does.
"""

from __future__ import annotations

import asyncio
import os
import sys

from temporalio.client import Client
from temporalio.worker import Worker

from support.wl_workflows import Migrate
from work_ledger.temporal.plugin import WorkLedgerPlugin


async def main(address: str, namespace: str, queue: str) -> None:
    client = await Client.connect(address, namespace=namespace)
    plugin = WorkLedgerPlugin(os.environ["WL_URL"], os.environ["WL_TOKEN"])
    worker = Worker(
        client, task_queue=queue, workflows=[Migrate], plugins=[plugin], max_cached_workflows=0
    )
    print("worker running", flush=True)
    await worker.run()


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:4]))
