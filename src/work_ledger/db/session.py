"""Whether a URL reaches PostgreSQL with a session of its own, or a transaction pooler.

Behind PgBouncer in transaction mode (the mode most deployments run) each transaction may
run on another server connection. LISTEN then stays on a server the listener no longer
holds, and its wake-ups go nowhere, silently. So the URL that listens is proven first: it
LISTENs, a second connection NOTIFYs, and the notification must arrive.
"""

from __future__ import annotations

import asyncio
import secrets
from typing import Any

from work_ledger.db.connect import connect
from work_ledger.errors import Unavailable

# A local NOTIFY arrives in milliseconds; this only has to outlast a busy server.
PROBE_SECONDS = 5.0


async def hears_itself(url: str, *, within: float = PROBE_SECONDS) -> bool:
    """True if a LISTEN on `url` hears a NOTIFY sent over another connection to `url`."""
    channel = f"wl_probe_{secrets.token_hex(8)}"  # ours alone; letters and digits only
    heard = asyncio.Event()

    def on_notify(*_: Any) -> None:
        heard.set()

    listener = await connect(url, pooled=True)
    try:
        await listener.add_listener(channel, on_notify)
        sender = await connect(url, pooled=True)
        try:
            await sender.execute(f"NOTIFY {channel}")
        finally:
            await sender.close()
        try:
            await asyncio.wait_for(heard.wait(), within)
        except TimeoutError:
            return False
        return True
    finally:
        listener.terminate()  # through a pooler, a polite close may wait on a lent server


async def require_session(url: str, *, variable: str) -> None:
    """Refuse to start on a `url` (named by environment `variable`) whose LISTEN is deaf."""
    if not await hears_itself(url):
        raise Unavailable(
            f"LISTEN on {variable} did not hear its own NOTIFY within {PROBE_SECONDS:g}s: "
            "that URL goes through a transaction pooler (PgBouncer pool_mode = transaction), "
            "where long-poll wake-ups would be lost and migrations would lose their lock. "
            "Set WL_DIRECT_DATABASE_URL to a URL that reaches PostgreSQL itself (or PgBouncer "
            "in session mode); WL_DATABASE_URL may stay on the pooler"
        )
