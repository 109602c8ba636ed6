"""Auth per DESIGN §7: the role matrix, sub-agents, impersonation, revoked tokens."""

from __future__ import annotations

import asyncio
import os
import sys
import time
from pathlib import Path

import httpx

from support.api_support import SECRET, Api, assert_problem, claimed, register
from work_ledger.service.tokens import CACHE_SECONDS, Role, TokenStore

NOWHERE = "00000000-0000-4000-8000-000000000000"
READS = [
    ("GET", "/units"),
    ("GET", "/units/x"),
    ("GET", "/units/x/events"),
    ("GET", "/events"),
    ("GET", "/questions"),
    ("GET", f"/questions/{NOWHERE}"),
]
WRITES: dict[tuple[str, str], set[Role]] = {
    ("/units", '{"units":[{"external_ref":"m","fleet":"f"}]}'): set(),
    ("/units/claim", "{}"): {Role.AGENT},
    ("/units/x/claim", "{}"): {Role.AGENT},
    (f"/attempts/{NOWHERE}/heartbeat", "{}"): {Role.AGENT},
    (f"/attempts/{NOWHERE}/cost", '{"cost_cents":1}'): {Role.AGENT},
    ("/units/x/transition", '{"to":"in_progress"}'): {Role.AGENT},
    ("/units/x/transition", '{"to":"ready"}'): {Role.AGENT},
    ("/units/x/transition", '{"to":"verified","evidence_url":"https://e.x/1"}'): {
        Role.AGENT,
        Role.HARNESS,
    },
    ("/units/x/block", '{"question":"q"}'): {Role.AGENT, Role.HARNESS},
    ("/units/x/unblock", '{"answer":"a"}'): {Role.TRIAGE},
    ("/units/x/dispose", '{"disposition":"DEAD"}'): {Role.AGENT},
    (f"/questions/{NOWHERE}/cancel", "{}"): {Role.AGENT, Role.TRIAGE},
}


async def test_role_matrix_allows_or_forbids_each_endpoint(
    api: Api, operator: httpx.AsyncClient
) -> None:
    """Each role against each endpoint: allowed (a 2xx, or a 4xx refusal naming another rule:
    unknown unit, wrong state, not the holder) or 403 forbidden. Never a 5xx."""
    await register(operator, "x")
    for role in Role:
        await _check_role(api, role)


async def _check_role(api: Api, role: Role) -> None:
    client = await api.as_role(role, f"{role}-1")
    for method, path in READS:
        response = await client.request(method, path)
        assert response.status_code in (200, 404), (role, path, response.text)
    for (path, body), roles in WRITES.items():
        response = await client.post(
            path, content=body, headers={"Content-Type": "application/json"}
        )
        allowed = role is Role.OPERATOR or role in roles
        if allowed:
            _assert_allowed(response, (role, path, body))
        else:
            assert_problem(response, 403, "forbidden")


def _assert_allowed(response: httpx.Response, what: object) -> None:
    """Served: a 2xx, or a refusal of this request by a rule other than the caller's role."""
    if response.is_success:
        return
    assert 400 <= response.status_code < 500, (what, response.text)
    code = assert_problem(response, response.status_code)["code"]
    assert code not in ("forbidden", "unauthorized"), (what, response.text)


async def test_missing_malformed_unknown_tokens_are_401(api: Api) -> None:
    """No token, a malformed token, a well-formed unknown token: 401 with a next step."""
    wrong_secret = TokenStore(api.tokens.store, b"another-secret")
    forged, _ = await wrong_secret.create(Role.OPERATOR, "forger")
    for headers in (
        {},
        {"Authorization": "Bearer nope"},
        {"Authorization": "Basic abc"},
        {"Authorization": f"Bearer {forged}"},
        {"Authorization": "Bearer wl_0123abcd_" + "x" * 43},
    ):
        response = await api.client(**headers).get("/units")
        body = assert_problem(response, 401, "unauthorized")
        assert "token" in body["detail"]
        assert response.headers["WWW-Authenticate"] == "Bearer"


async def test_sub_agent_narrows_but_never_widens(api: Api, operator: httpx.AsyncClient) -> None:
    """principal/suffix acts as a sub-agent; another principal, or a trick, is 403."""
    await register(operator, "a", "b")
    token = await api.token(Role.AGENT, "agent-1")
    sub = api.client(token, **{"X-WL-Agent": "agent-1/worker-3"})
    assert (await sub.post("/units/claim", json={})).json()["unit"][
        "claimed_by"
    ] == "agent-1/worker-3"
    for name in ("agent-2", "agent-10/x", "agent-1/", "agent-1/a/b", "/agent-1", "agent-1x/y"):
        response = await api.client(token, **{"X-WL-Agent": name}).post("/units/claim", json={})
        assert_problem(response, 403, "forbidden")
    smuggled = await api.client(token).post("/units/claim", json={"agent": "agent-2"})
    assert_problem(smuggled, 422, "invalid_input")
    assert [u["claimed_by"] for u in (await operator.get("/units")).json()["items"]] == [
        "agent-1/worker-3",
        None,
    ]


async def test_agent_cannot_touch_sub_agents_units(api: Api, operator: httpx.AsyncClient) -> None:
    """The principal and its sub-agent are different holders."""
    await register(operator, "a")
    token = await api.token(Role.AGENT, "agent-1")
    unit, attempt = await claimed(api.client(token, **{"X-WL-Agent": "agent-1/w"}))
    plain = api.client(token)
    assert_problem(
        await plain.post(f"/attempts/{attempt}/cost", json={"cost_cents": 3}), 403, "not_holder"
    )
    assert_problem(
        await plain.post(f"/units/{unit}/transition", json={"to": "in_progress"}), 403, "not_holder"
    )


async def test_revoked_token_is_refused_within_the_cache_window(api: Api) -> None:
    """Revoked on another replica: refused here within CACHE_SECONDS; here: at once."""
    local = await api.token(Role.READER, "r1")
    remote = await api.token(Role.READER, "r2")
    for token in (local, remote):
        assert (await api.client(token).get("/units")).status_code == 200
    await api.tokens.revoke(local.split("_")[1])
    assert_problem(await api.client(local).get("/units"), 401, "unauthorized")
    other_replica = TokenStore(api.tokens.store, SECRET.encode())
    await other_replica.revoke(remote.split("_")[1])
    started = time.monotonic()
    while (await api.client(remote).get("/units")).status_code == 200:
        # Sent this long after the revocation, the request was still served from the cache.
        assert time.monotonic() - started < CACHE_SECONDS + 10  # 10x the slack it had
        await asyncio.sleep(0.25)
    body = assert_problem(await api.client(remote).get("/units"), 401, "unauthorized")
    assert "revoked" in body["detail"]


async def _cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from work_ledger.cli import main; main()",
        *args,
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await proc.communicate()
    assert proc.returncode is not None
    return proc.returncode, out.decode() + err.decode()


async def test_token_cli_create_list_revoke(api: Api, database_url: str, tmp_path: Path) -> None:
    """`token create` prints the token alone on the last line; list shows it; revoke kills it."""
    env = {"WL_DATABASE_URL": database_url, "WL_SECRET": SECRET, "WL_HOME": str(tmp_path)}
    proc = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        "from work_ledger.cli import main; main()",
        "token",
        "create",
        "--role",
        "agent",
        "--principal",
        "cli-agent",
        env={**os.environ, **env},
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, _ = await proc.communicate()
    token = out.decode().strip().splitlines()[-1]
    replica = TokenStore(api.tokens.store, SECRET.encode())
    assert (await replica.verify(token)).principal == "cli-agent"
    code, listing = await _cli(env, "token", "list")
    prefix = token.split("_")[1]
    assert (code, prefix in listing, token in listing) == (0, True, False)
    code, _ = await _cli(env, "token", "revoke", prefix)
    assert code == 0
    assert_problem(await api.client(token).get("/units"), 401, "unauthorized")
