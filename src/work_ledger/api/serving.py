"""uvicorn's server with one step added to its graceful shutdown: drain the long-polls.

On SIGTERM uvicorn stops accepting, lets the requests in flight finish, then runs the
lifespan's shutdown (the listener, the pool; the embedded PostgreSQL stops at exit). A
long-poll in flight would hold that up for its whole `wait_seconds` (up to
MAX_WAIT_SECONDS), longer than any grace period a supervisor gives: here each one answers
at once instead (`unit: null`, api/longpoll.py `Notifier.drain`).
"""

from __future__ import annotations

import asyncio
import socket

import uvicorn
from fastapi import FastAPI


def drain_long_polls(app: FastAPI) -> None:
    """Wake every long-poll of `app` for good (nothing to do before start-up finished)."""
    notifier = getattr(app.state, "notifier", None)
    if notifier is not None:
        notifier.drain()


class DrainingServer(uvicorn.Server):
    """A uvicorn server whose shutdown answers the long-polls it holds at once."""

    def __init__(self, config: uvicorn.Config, app: FastAPI) -> None:
        super().__init__(config)
        self.ledger_app = app

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        # Scheduled, not called: uvicorn's shutdown closes the listening sockets before it
        # first awaits, and this runs at that await. A long-poll answered before then
        # would let its client ask again here, at a replica that is going away.
        asyncio.get_running_loop().call_soon(drain_long_polls, self.ledger_app)
        await super().shutdown(sockets)
