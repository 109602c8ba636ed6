"""Limits before work: header size, read deadlines, authentication before the body, and
failed authentication limited per client."""

from __future__ import annotations

import asyncio
from typing import Any, cast
from urllib.parse import urlsplit

import asyncpg
import httpx
from asyncpg import Pool

from support.api_support import SECRET, Api, MakeApi, assert_problem
from work_ledger.api.connection import Limits
from work_ledger.api.ratelimit import FailureLimiter
from work_ledger.db.store import Store
from work_ledger.errors import Unauthorized
from work_ledger.service.tokens import Role, TokenStore

SHORT = Limits(max_head_bytes=4096, head_seconds=0.5, body_seconds=0.5)
CLOSED_WITHIN = 10.0  # the deadlines above are 0.5 s: 20x generous


async def _connect(url: str) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    parts = urlsplit(url)
    assert parts.hostname is not None
    assert parts.port is not None
    return await asyncio.open_connection(parts.hostname, parts.port)


async def _answer(reader: asyncio.StreamReader) -> bytes:
    """Everything the server writes until it closes the connection."""
    async with asyncio.timeout(CLOSED_WITHIN):
        return await reader.read()


async def test_oversized_headers_are_431_before_the_app(make_api: MakeApi) -> None:
    """A head past the limit, complete or never finished, is a 431 problem and a closed
    socket; one within it is served."""
    api = await make_api(limits=SHORT)
    heads = (
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Big: " + b"a" * 100_000 + b"\r\n\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\n" + b"X-Many: 1234567890\r\n" * 400 + b"\r\n", 431),
        (b"GET /healthz HTTP/1.1\r\nX-Endless: " + b"c" * 1_000_000, 431),
        (b"GET /healthz HTTP/1.1\r\nHost: x\r\nX-Pad: " + b"b" * 3000 + b"\r\n\r\n", 200),
    )
    for head, status in heads:
        reader, writer = await _connect(api.url)
        writer.write(head)
        answered = await _answer(reader)  # 200: the idle connection is closed after it
        writer.close()
        assert answered.startswith(f"HTTP/1.1 {status} ".encode()), answered[:200]
        if status == 431:
            assert b'"code":"headers_too_large"' in answered.replace(b" ", b"")


async def test_stalled_connections_are_closed(make_api: MakeApi) -> None:
    """Nothing sent, half a header, half a body: each connection is closed by the server."""
    api = await make_api(limits=SHORT)
    token = await api.token(Role.OPERATOR, "op")
    stalls = (
        b"",
        b"GET /healthz HTTP/1.1\r\nHost: x\r\n",
        b"POST /units HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer "
        + token.encode()
        + b'\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{"units":',
    )
    held = [await _connect(api.url) for _ in stalls]
    for (_, writer), sent in zip(held, stalls, strict=True):
        writer.write(sent)
    for reader, writer in held:
        answered = await _answer(reader)  # returns only once the server closed it
        writer.close()
        assert b" 200 " not in answered
    async with httpx.AsyncClient(base_url=api.url) as client:  # still serving
        assert (await client.get("/healthz")).status_code == 200


async def test_half_a_header_after_an_answer_is_closed(make_api: MakeApi) -> None:
    """The head deadline runs again from each response: a kept-alive connection that then
    sends half a header is closed as well."""
    api = await make_api(limits=SHORT)
    reader, writer = await _connect(api.url)
    # Half the deadline in, so that the deadline moves past the one set at connecting.
    await asyncio.sleep(SHORT.head_seconds / 2)
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
    head = await reader.readuntil(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200 ")
    writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n")
    rest = await _answer(reader)  # the first answer's body, then the server's close
    writer.close()
    assert b"HTTP/1.1" not in rest


async def test_a_long_poll_outlives_the_header_deadline(make_api: MakeApi) -> None:
    """The read deadlines bound reading a request, not answering one."""
    api = await make_api(limits=SHORT)
    reader = await api.as_role(Role.READER, "r")
    response = await reader.get("/questions", params={"wait_seconds": 2})
    assert response.status_code == 200
    assert (await reader.get("/healthz")).status_code == 200  # and the connection is reused


async def test_anonymous_body_is_401_not_parsed(make_api: MakeApi) -> None:
    """Without a token, a malformed or deep body is refused 401 before it is parsed."""
    api = await make_api()
    anonymous = api.client()
    for body in (b"{not json", b"[" * 100_000, b'{"units": 5}'):
        response = await anonymous.post(
            "/units", content=body, headers={"Content-Type": "application/json"}
        )
        assert_problem(response, 401, "unauthorized")


async def test_failed_authentication_is_limited_per_client_and_token(make_api: MakeApi) -> None:
    """Past its burst of failures with one token's prefix a client gets 429 with
    Retry-After for that prefix; the other tokens from the same address are still served,
    a token verified a moment ago and one never seen before alike."""
    api = await make_api(auth_failures=FailureLimiter(burst=3, per_second=0.05))
    good = await api.as_role(Role.READER, "r")
    assert (await good.get("/units")).status_code == 200  # verified: now cached
    not_yet_used = await api.token(Role.READER, "r2")
    revoked = await api.token(Role.AGENT, "gone")
    prefix = revoked.split("_")[1]
    await api.tokens.revoke(prefix)
    statuses = [(await api.client(revoked).get("/units")).status_code for _ in range(3)]
    for n in range(3):  # guessing its secret: the same prefix
        wrong = api.client(f"wl_{prefix}_{'x' * (40 + n)}")
        statuses.append((await wrong.get("/units")).status_code)
    assert statuses == [401, 401, 401, 429, 429, 429]
    limited = await api.client(revoked).get("/units")
    problem = assert_problem(limited, 429, "rate_limited")
    assert int(limited.headers["Retry-After"]) >= 1
    assert "Retry-After" in problem["detail"]
    assert f"wl_{prefix}_" in problem["detail"]
    assert (await good.get("/units")).status_code == 200
    assert (await api.client(not_yet_used).get("/units")).status_code == 200
    other = api.client(f"wl_{'0' * 8}_{'y' * 40}")  # another prefix: a budget of its own
    assert_problem(await other.get("/units"), 401, "unauthorized")


class _Counted:
    """The app's pool, recording each statement sent through it (to count round trips)."""

    def __init__(self, pool: Pool) -> None:
        self.pool = pool
        self.sent: list[str] = []

    async def fetch(self, query: str, *args: Any) -> list[asyncpg.Record]:
        self.sent.append(query)
        return await self.pool.fetch(query, *args)

    async def fetchrow(self, query: str, *args: Any) -> asyncpg.Record | None:
        self.sent.append(query)
        return await self.pool.fetchrow(query, *args)

    def get_max_size(self) -> int:
        return self.pool.get_max_size()


async def test_unknown_prefixes_cost_no_lookup_of_their_own(api: Api) -> None:
    """200 tokens with unknown prefixes at once: no per-token lookup, a shared reload or
    two; a token minted afterwards by another process is still found at once."""
    counted = _Counted(api.tokens.store.pool)
    tokens = TokenStore(Store(cast(Pool, counted)), SECRET.encode())
    wrong = [f"wl_{n:08x}_{'z' * 40}" for n in range(200)]
    results = await asyncio.gather(*(tokens.verify(t) for t in wrong), return_exceptions=True)
    assert all(isinstance(r, Unauthorized) for r in results)
    assert [q for q in counted.sent if "WHERE prefix = $1" in q] == []
    assert 1 <= len(counted.sent) <= 2
    fresh = await api.token(Role.READER, "minted-elsewhere")
    assert (await tokens.verify(fresh)).principal == "minted-elsewhere"


async def test_an_idle_connection_outlives_the_clients_keep_alive(make_api: MakeApi) -> None:
    """serve keeps an idle connection open longer than httpx (the SDK) keeps reusing one: a
    client never sends on a connection the server is closing at that moment."""
    api = await make_api(limits=Limits())  # serve's own limits
    reader, writer = await _connect(api.url)
    try:
        for _ in range(2):
            writer.write(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")
            head = await reader.readuntil(b"\r\n\r\n")
            assert head.startswith(b"HTTP/1.1 200 ")
            length = int(head.lower().split(b"content-length:")[1].split(b"\r\n")[0])
            await reader.readexactly(length)
            # Idle as long as httpx may still reuse the connection, and a little more.
            await asyncio.sleep(httpx.Limits().keepalive_expiry + 0.5)
        assert not reader.at_eof()
    finally:
        writer.close()
