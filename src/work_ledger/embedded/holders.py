"""The processes that hold the embedded server open, recorded in a file beside its data.

Each holder is kept as its pid and its start time: a pid alone is reused (after a reboot,
or on a busy host), so a recorded holder counts only while a process with that pid and
that start time is alive. A holder killed with SIGKILL (or by the OOM killer, or a
reboot) never removes itself; the next process to attach or detach drops it, so the last
live holder still stops the server.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import psutil

# psutil reports a start time to the clock tick; the same process reads back the same.
_SAME_START_SECONDS = 0.05


@dataclass(frozen=True, slots=True)
class Holder:
    pid: int
    started: float

    @classmethod
    def me(cls) -> Holder:
        return cls(os.getpid(), psutil.Process().create_time())

    def alive(self) -> bool:
        try:
            process = psutil.Process(self.pid)
            if process.status() == psutil.STATUS_ZOMBIE:
                return False
            return bool(abs(process.create_time() - self.started) < _SAME_START_SECONDS)
        except psutil.Error:  # gone, or no longer ours to see
            return False


def live_holders(record: Path) -> list[Holder]:
    """The recorded holders whose process is still the one that attached."""
    try:
        rows = json.loads(record.read_text())
    except (FileNotFoundError, ValueError):
        return []
    holders = [Holder(int(row["pid"]), float(row["started"])) for row in rows]
    return [h for h in holders if h.alive()]


def write_holders(record: Path, holders: list[Holder]) -> None:
    rows = [{"pid": h.pid, "started": h.started} for h in holders]
    temporary = record.with_suffix(".tmp")
    temporary.write_text(json.dumps(rows))
    temporary.replace(record)
