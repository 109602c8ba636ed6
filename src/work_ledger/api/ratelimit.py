"""Failed authentications, limited per client address and token prefix (a token bucket
each).

Each (address, prefix) may fail `burst` times at once, then once per `1 / per_second`
seconds; past that its requests with a token not already verified get 429 with
Retry-After, before any token lookup. The prefix is part of the key because a fleet's
agents often share one host's address: one agent retrying a revoked token in a loop, or a
neighbour guessing one token's secret, limits that prefix only, and every other token from
the address is still verified. Tokens that are not work-ledger tokens at all share the
prefix "" (they are refused without a lookup anyway). A token verified in the last few
seconds (the token cache) is served even when its own prefix is limited.
"""

from __future__ import annotations

import math
import time

MAX_KEYS = 100_000

Key = tuple[str, str]  # (client address, token prefix)


class FailureLimiter:
    def __init__(self, burst: int = 20, per_second: float = 1.0) -> None:
        self.burst = burst
        self.per_second = per_second
        self._buckets: dict[Key, tuple[float, float]] = {}  # key: (tokens, at)

    def _tokens(self, key: Key, now: float) -> float:
        tokens, at = self._buckets.get(key, (float(self.burst), now))
        return min(float(self.burst), tokens + (now - at) * self.per_second)

    def retry_after(self, key: Key) -> int:
        """0 if `key` may try a token now, else the seconds until it may."""
        tokens = self._tokens(key, time.monotonic())
        return 0 if tokens >= 1.0 else math.ceil((1.0 - tokens) / self.per_second)

    def failed(self, key: Key) -> None:
        now = time.monotonic()
        if len(self._buckets) >= MAX_KEYS:
            self._buckets.clear()  # forget everyone rather than grow without bound
        self._buckets[key] = (self._tokens(key, now) - 1.0, now)
