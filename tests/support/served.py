"""Real processes for the fault tests: `work-ledger serve` as a subprocess, the CLI, tokens.

Every server here is a child process of the test, started with `WL_DATABASE_URL` pointing
at the test's database and `WL_HOME` in a temporary directory, so a test may kill it with a
real signal and start it again on the same port.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx
import psutil

from support.ports import free_port
from work_ledger.db.connect import create_pool
from work_ledger.db.store import Store
from work_ledger.service.tokens import Role, TokenStore

SECRET = "faults-test-secret"
WORK_LEDGER = str(Path(sys.executable).with_name("work-ledger"))
START_TIMEOUT = 60.0
CLI_TIMEOUT = 120.0


def ledger_env(database_url: str, home: Path, **extra: str) -> dict[str, str]:
    """The environment of every work-ledger process of one test."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    env.update(
        {
            "WL_DATABASE_URL": database_url,
            "WL_HOME": str(home),
            "WL_SECRET": SECRET,
            "WL_LEASE_SECONDS": "30",
            **extra,  # a test's own values win (a shorter lease)
        }
    )
    return env


class PortTaken(AssertionError):
    def __init__(self, port: int, log: str) -> None:
        super().__init__(
            f"/readyz on port {port} was answered by another process (another test run's "
            f"server took the port before ours bound it); our server's log:\n{log}"
        )


def listens_on(pid: int, port: int) -> bool:
    """Whether process `pid` (or a child of it) listens on TCP `port`."""
    try:
        main = psutil.Process(pid)
        processes = [main, *main.children(recursive=True)]
    except psutil.NoSuchProcess:
        return False
    for process in processes:
        with contextlib.suppress(psutil.NoSuchProcess):
            for conn in process.net_connections(kind="tcp"):
                if conn.status == psutil.CONN_LISTEN and conn.laddr and conn.laddr.port == port:
                    return True
    return False


@dataclass
class Served:
    """One `work-ledger serve` child process, restartable on the same port."""

    env: dict[str, str]
    home: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen[bytes] | None = None
    starts: int = 0
    serve_args: tuple[str, ...] = ()  # e.g. ("--no-migrate",)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    async def start(self) -> None:
        """Start the server and wait until /readyz answers 200. A first start whose port
        another run's server took moves to another port; a restart (same port) fails."""
        first = self.starts == 0
        self.spawn()
        await self.wait_ready_or_move(may_move=first)

    async def wait_ready_or_move(self, *, may_move: bool = True) -> None:
        """`wait_ready`; if another run's server took the port, start again on another
        port (up to three times), or fail when the port must stay (`may_move=False`)."""
        for _ in range(3):
            try:
                await self.wait_ready()
                return
            except PortTaken:
                self.stop()
                if not may_move:
                    raise
                self.port = free_port()
                self.spawn()
        await self.wait_ready()

    def spawn(self) -> None:
        self.starts += 1
        with open(self.home / f"serve-{self.starts}.log", "wb") as log:
            self.proc = subprocess.Popen(
                [WORK_LEDGER, "serve", "--port", str(self.port), *self.serve_args],
                env=self.env,
                stdout=log,
                stderr=subprocess.STDOUT,
            )

    async def wait_ready(self, within: float = START_TIMEOUT) -> float:
        """Seconds until /readyz answered 200 (fails if the process died or time ran out).

        The 200 must come from this process: other test runs on the machine hand out the
        same ports (support/ports.py), and one of their servers may have bound ours between
        the check that it was free and our bind. Our requests would then reach a ledger that
        knows none of our tokens (a burst of 401s)."""
        started = time.monotonic()
        async with httpx.AsyncClient(base_url=self.url, timeout=3) as client:
            while time.monotonic() - started < within:
                assert self.proc is not None
                assert self.proc.poll() is None, self.log_tail()
                with contextlib.suppress(httpx.HTTPError):
                    if (await client.get("/readyz")).status_code == 200:
                        if not listens_on(self.proc.pid, self.port):
                            raise PortTaken(self.port, self.log_tail())
                        return time.monotonic() - started
                await asyncio.sleep(0.1)
        raise AssertionError(f"serve was not ready within {within}s\n{self.log_tail()}")

    def kill(self, sig: int = signal.SIGKILL) -> None:
        """Send a real signal to the server and reap it."""
        assert self.proc is not None
        self.proc.send_signal(sig)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(timeout=15)

    def log_tail(self, lines: int = 30) -> str:
        logs = sorted(self.home.glob("serve-*.log"))
        if not logs:
            return "(no server log)"
        return "\n".join(logs[-1].read_text(errors="replace").splitlines()[-lines:])


async def cli(env: dict[str, str], *args: str) -> tuple[int, str]:
    """Run `work-ledger ARGS` as a subprocess: (exit code, stdout and stderr)."""
    proc = await asyncio.create_subprocess_exec(
        WORK_LEDGER,
        *args,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
    )
    out, _ = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
    assert proc.returncode is not None
    return proc.returncode, out.decode(errors="replace")


async def cli_token(env: dict[str, str], role: Role, principal: str) -> str:
    """A token minted by `work-ledger token create` (printed on its last stdout line)."""
    proc = await asyncio.create_subprocess_exec(
        WORK_LEDGER,
        "token",
        "create",
        "--role",
        role.value,
        "--principal",
        principal,
        env=env,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    out, err = await asyncio.wait_for(proc.communicate(), CLI_TIMEOUT)
    assert proc.returncode == 0, err.decode(errors="replace")
    return out.decode().strip().splitlines()[-1]


async def mint(database_url: str, grants: Sequence[tuple[Role, str]]) -> list[str]:
    """Tokens minted in-process with the servers' secret (the CLI costs ~2 s per token)."""
    pool = await create_pool(database_url, min_size=1, max_size=1)
    try:
        tokens = TokenStore(Store(pool), SECRET.encode())
        return [(await tokens.create(role, principal))[0] for role, principal in grants]
    finally:
        await pool.close()


async def mint_fleet(database_url: str, names: Sequence[str]) -> tuple[str, str, dict[str, str]]:
    """An operator's token ("op"), triage's ("triage"), and each agent's of `names`."""
    grants = [(Role.OPERATOR, "op"), (Role.TRIAGE, "triage")] + [(Role.AGENT, n) for n in names]
    operator, triage, *tokens = await mint(database_url, grants)
    return operator, triage, dict(zip(names, tokens, strict=True))


async def audit(env: dict[str, str]) -> tuple[int, str]:
    """`work-ledger audit` in a subprocess: (exit code, what it printed)."""
    return await cli(env, "audit")


StartServer = Callable[..., Awaitable[Served]]


# `serve` closes a connection idle 10 s, httpx reuses one idle up to 5 s; on a machine
# loaded enough to stall a test's client for seconds the two could still race (a
# ReadError). Drop idle connections well before.
KEEPALIVE_EXPIRY = 1.0


def client(url: str, token: str | None = None, **kwargs: Any) -> httpx.AsyncClient:
    headers = {} if token is None else {"Authorization": f"Bearer {token}"}
    kwargs.setdefault("limits", httpx.Limits(keepalive_expiry=KEEPALIVE_EXPIRY))
    return httpx.AsyncClient(base_url=url, headers=headers, **kwargs)
