"""`Heartbeat`: one beat every interval, in a daemon thread (the twin of `_aio_heartbeat.py`)."""

from __future__ import annotations

import threading
from collections.abc import Callable


class Heartbeat:
    """Calls `beat()` every `interval` seconds until it returns False or `stop()` is called."""

    def __init__(
        self, beat: Callable[[], bool], interval: float, *, name: str, patience: float
    ) -> None:
        self._beat, self.interval, self.name, self.patience = beat, interval, name, patience
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        if self._thread is None:
            # Each thread has its own stop flag: one left behind by `stop()` ends on its own.
            self._stop = threading.Event()
            self._thread = threading.Thread(
                target=self._run, args=(self._stop,), name=self.name, daemon=True
            )
            self._thread.start()

    def stop(self) -> None:
        """Stop the beats; wait up to `patience` seconds for a beat under way to end."""
        self._stop.set()
        thread, self._thread = self._thread, None
        if thread is not None and thread is not threading.current_thread():
            thread.join(timeout=self.patience)

    def _run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            if not self._beat():
                return
