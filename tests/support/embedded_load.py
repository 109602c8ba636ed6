"""The embedded default under the history-checked workload, for the recovery tests.

`start_embedded` serves a new WL_HOME (with WL_WAL_MIRROR when given); `load` registers
units and runs the agents of `workload.py` while the test acts; `up_to` cuts a recorded
history at a moment, as a point-in-time recovery sees it: a request answered before that
moment counts as it was answered, one sent after it never happened, and one in flight
across it is in doubt.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Callable
from dataclasses import replace
from pathlib import Path
from urllib.parse import quote

from support.served import Served, client, ledger_env, mint
from support.workload import Chaos, Recorder, Workload
from work_ledger.service.tokens import Role

AGENTS = 4
UNITS = 400


def embedded_env(home: Path, **extra: str) -> dict[str, str]:
    """The environment of a work-ledger process on the embedded default under `home`."""
    return ledger_env("", home, **extra)  # an empty WL_DATABASE_URL: the embedded server


def embedded_url(home: Path) -> str:
    """The running embedded server's ledger database, as its owner reaches it (reading
    postmaster.pid; connecting does not make this process one of the server's holders)."""
    socket_dir = (home / "pgdata" / "postmaster.pid").read_text().splitlines()[4]
    return (
        f"postgresql://postgres@/work_ledger?host={quote(socket_dir, safe='/')}"
        f"&passfile={quote(str(home / 'pgpass'), safe='/')}"
    )


@contextlib.asynccontextmanager
async def load(server: Served, database_url: str) -> AsyncIterator[Workload]:
    """Units registered and the agents at work until the block ends (`database_url`: the
    ledger's database, where the tokens are minted)."""
    names = [f"rec-agent-{i}" for i in range(AGENTS)]
    operator, triage, *tokens = await mint(
        database_url,
        [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage")] + [(Role.AGENT, n) for n in names],
    )
    async with client(server.url, operator, timeout=30) as op:
        units = [{"external_ref": f"rec-{i}", "fleet": "f"} for i in range(UNITS)]
        assert (await op.post("/units", json={"units": units})).status_code == 200
    chaos = Chaos(client_timeout=0.05, die=0.03, refused=0.1, duplicate=0.1, block=0.1)
    workload = Workload(server.url, dict(zip(names, tokens, strict=True)), triage, chaos=chaos)
    running = asyncio.create_task(workload.run())
    try:
        yield workload
    finally:
        workload.stop.set()
        await running


async def until(condition: Callable[[], bool], within: float = 60.0) -> None:
    deadline = time.monotonic() + within
    while not condition():
        assert time.monotonic() < deadline, "the workload never got that far"
        await asyncio.sleep(0.05)


def up_to(recorder: Recorder, moment: float) -> Recorder:
    """The history as a recovery to `moment` (time.monotonic()) must show it."""
    cut = Recorder()
    for op in recorder.ops:
        if op.started >= moment:
            continue
        if op.ended > moment:  # in flight: it may or may not have committed before
            op = replace(op, status=None, response=None, replayed=False, error="cut at T")
        cut.ops.append(op)
    return cut
