"""The background heartbeats, the one part of the SDK written twice (a thread, a task)."""

from __future__ import annotations

import asyncio
import threading

from work_ledger.client._aio_heartbeat import AsyncHeartbeat
from work_ledger.client._heartbeat import Heartbeat


def test_thread_beats_until_a_beat_says_stop() -> None:
    """Each beat runs in turn; the one returning False is the last."""
    beats: list[int] = []
    ended = threading.Event()

    def beat() -> bool:
        beats.append(len(beats))
        if len(beats) == 3:
            ended.set()
        return len(beats) < 3

    heartbeat = Heartbeat(beat, 0.01, name="t", patience=10)
    heartbeat.start()
    assert ended.wait(30)
    heartbeat.stop()
    assert beats == [0, 1, 2]


def test_thread_stopped_before_its_first_beat_never_beats_and_can_start_again() -> None:
    """stop() wakes the thread out of its wait; a later start() runs a fresh one."""
    beats: list[str] = []
    again = threading.Event()

    def beat() -> bool:
        beats.append("beat")
        again.set()
        return False

    heartbeat = Heartbeat(beat, 3600, name="t", patience=10)
    heartbeat.start()
    heartbeat.stop()
    assert beats == []
    heartbeat.interval = 0.01
    heartbeat.start()
    assert again.wait(30)
    assert beats == ["beat"]


async def test_task_beats_until_a_beat_says_stop_and_stop_cancels_a_wait() -> None:
    """The asyncio twin: beats in turn until False; stop() cancels one still waiting."""
    beats: list[int] = []
    ended = asyncio.Event()

    async def beat() -> bool:
        beats.append(len(beats))
        if len(beats) == 3:
            ended.set()
        return len(beats) < 3

    heartbeat = AsyncHeartbeat(beat, 0.01, name="t", patience=10)
    heartbeat.start()
    await asyncio.wait_for(ended.wait(), 30)
    await heartbeat.stop()
    assert beats == [0, 1, 2]
    idle = AsyncHeartbeat(beat, 3600, name="idle", patience=10)
    idle.start()
    await idle.stop()
    assert beats == [0, 1, 2]
