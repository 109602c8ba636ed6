"""Real processes around a real Temporal: the CLI follower (SIGKILLed and restarted),
`reconcile --temporal`, `audit`, and a worker SIGKILLed mid-workflow."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from pathlib import Path

from temporalio.client import Client

from support.temporal_support import ids, register, settle, start, transitions, until, worker
from work_ledger.service.ledger import Ledger

WORK_LEDGER = str(Path(sys.executable).with_name("work-ledger"))
HERE = Path(__file__).parent


def _env(database_url: str, home: Path, served, address: str, namespace: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    env.update(
        WL_DATABASE_URL=database_url,
        WL_HOME=str(home),
        WL_URL=served.url,
        WL_TOKEN=served.projector_token,
        WL_TEMPORAL_ADDRESS=address,
        WL_TEMPORAL_NAMESPACE=namespace,
    )
    return env


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        WORK_LEDGER,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), 120)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def _state(ledger: Ledger, workflow_id: str) -> str:
    return str((await ledger.get_unit(f"unit-{workflow_id}")).unit.state)


async def test_cli_follower_killed_restarted_and_reconcile_temporal(
    ledger: Ledger,
    served,
    temporal_address: str,
    namespace: str,
    database_url: str,
    tmp_path: Path,
) -> None:
    """`temporal follow` projects, is SIGKILLed; reconcile --temporal is clean; a run is
    terminated while no follower runs and reconcile names its unit; `follow --once`
    catches up; reconcile and audit are clean again."""
    env = _env(database_url, tmp_path, served, temporal_address, namespace)
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids("complete", "fail", "running")
    await register(ledger, *names.values())
    async with worker(client) as queue:
        await settle([await start(client, queue, names[m], m) for m in ("complete", "fail")])
        running = await start(client, queue, names["running"], "wait")
        follow = await asyncio.create_subprocess_exec(
            *(WORK_LEDGER, "temporal", "follow", "--interval", "0.2", "--lag", "0"),
            env=env,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.DEVNULL,
        )
        try:
            wanted = {"complete": "verified", "fail": "ready", "running": "in_progress"}

            async def projected() -> bool:
                return {n: await _state(ledger, w) for n, w in names.items()} == wanted

            await until(projected, lambda: asyncio.sleep(0.2))
        finally:
            follow.send_signal(signal.SIGKILL)
            await follow.wait()
        assert (await _cli(env, "reconcile", "--temporal"))[0] == 0
        await running.terminate("stopped while no follower runs")
        await settle([running])
    code, out = await _cli(env, "reconcile", "--temporal")
    assert (code, f"state_mismatch\tunit-{names['running']}" in out) == (1, True), out
    assert "is terminated" in out
    code, out = await _cli(env, "temporal", "follow", "--once", "--lag", "0")
    assert code == 0, out
    assert await _state(ledger, names["running"]) == "abandoned"
    assert (await _cli(env, "reconcile", "--temporal"))[0] == 0
    assert (await _cli(env, "audit"))[0] == 0
    assert await transitions(ledger, names["complete"]) == [
        "claimed:ready->claimed",
        "transitioned:claimed->in_progress",
        "transitioned:in_progress->verified",
    ]


async def _worker(
    env: dict[str, str], address: str, namespace: str, queue: str
) -> asyncio.subprocess.Process:
    return await asyncio.create_subprocess_exec(
        *(sys.executable, str(HERE / "worker_main.py"), address, namespace, queue),
        env={**env, "PYTHONPATH": os.pathsep.join([str(HERE.parent), env.get("PYTHONPATH", "")])},
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.DEVNULL,
    )


async def test_worker_killed_mid_workflow_sends_nothing_twice(
    ledger: Ledger,
    served,
    temporal_address: str,
    namespace: str,
    database_url: str,
    tmp_path: Path,
) -> None:
    """The plugin's worker is SIGKILLed while its run waits; a new worker replays the
    history (no cache: every task replays) and finishes it: the ledger got exactly one
    request per step, and each transition is in the log once."""
    env = _env(database_url, tmp_path, served, temporal_address, namespace)
    client = await Client.connect(temporal_address, namespace=namespace)
    names = ids("run")
    await register(ledger, names["run"])
    queue = f"q-{names['run']}"
    first = await _worker(env, temporal_address, namespace, queue)
    try:
        handle = await start(client, queue, names["run"], "wait")

        async def started() -> bool:
            """Projected, and the local activity's result recorded in the history: from
            here on a replay must not send the start again."""
            history = await handle.fetch_history()
            markers = [e for e in history.events if e.HasField("marker_recorded_event_attributes")]
            return bool(markers) and await _state(ledger, names["run"]) == "in_progress"

        await until(started, lambda: asyncio.sleep(0.1))
    finally:
        first.send_signal(signal.SIGKILL)
        await first.wait()
    second = await _worker(env, temporal_address, namespace, queue)
    try:
        await handle.signal("proceed")
        await asyncio.wait_for(handle.result(), 60)
    finally:
        second.terminate()
        await second.wait()
    assert await _state(ledger, names["run"]) == "verified"
    assert served.paths.count("/projection/events") == 2  # started, completed: once each
    assert await transitions(ledger, names["run"]) == [
        "claimed:ready->claimed",
        "transitioned:claimed->in_progress",
        "transitioned:in_progress->verified",
    ]
    assert await ledger.audit() == []
