"""Failed authentications, limited per client address (a token bucket each).

Each client may fail `burst` times at once, then once per `1 / per_second` seconds; past
that its requests with a token not already verified get 429 with Retry-After, before any
token lookup. A token verified in the last few seconds (the token cache) is still served,
so a neighbour behind the same address guessing tokens does not lock an agent out.
"""

from __future__ import annotations

import math
import time

MAX_CLIENTS = 100_000


class FailureLimiter:
    def __init__(self, burst: int = 20, per_second: float = 1.0) -> None:
        self.burst = burst
        self.per_second = per_second
        self._buckets: dict[str, tuple[float, float]] = {}  # client: (tokens, at)

    def _tokens(self, client: str, now: float) -> float:
        tokens, at = self._buckets.get(client, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_second)

    def retry_after(self, client: str) -> int:
        """0 if `client` may try a token now, else the seconds until it may."""
        tokens = self._tokens(client, time.monotonic())
        return 0 if tokens >= 1.0 else math.ceil((1.0 - tokens) / self.per_second)

    def failed(self, client: str) -> None:
        now = time.monotonic()
        if len(self._buckets) >= MAX_CLIENTS:
            self._buckets.clear()  # forget everyone rather than grow without bound
        self._buckets[client] = (self._tokens(client, now) - 1.0, now)
