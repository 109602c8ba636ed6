"""`AsyncHeartbeat`: one beat every interval, in a task of the running loop.

This and `_heartbeat.py` (its thread twin) are the one part of the SDK written twice: a task
and a thread share no code. Everything else of the sync client is generated from the async
one (`scripts/unasync.py`).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable


class AsyncHeartbeat:
    """Awaits `beat()` every `interval` seconds until it returns False or `stop()` is awaited."""

    def __init__(
        self, beat: Callable[[], Awaitable[bool]], interval: float, *, name: str, patience: float
    ) -> None:
        self._beat, self.interval, self.name, self.patience = beat, interval, name, patience
        self._task: asyncio.Task[None] | None = None

    def start(self) -> None:
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._run(), name=self.name)

    async def stop(self) -> None:
        """Cancel the beats (a beat under way is cancelled too: its answer no longer matters)."""
        task, self._task = self._task, None
        if task is not None and task is not asyncio.current_task():
            task.cancel()
            # A beat that ignores its cancellation is left behind after `patience`.
            with contextlib.suppress(asyncio.CancelledError, TimeoutError):
                await asyncio.wait_for(task, self.patience)

    async def _run(self) -> None:
        while True:
            await asyncio.sleep(self.interval)
            if not await self._beat():
                return
