"""What an agent costs: the server's memory per idle MCP session, CPU per MCP tool call next
to the same call over REST, and the slim client's size, start-up and `run` wrapper memory.

    uv run --group bench python -m bench.agents [--slim DIR] [--sessions 64] [--calls 200]

Starts `work-ledger serve` (embedded PostgreSQL, a temporary WL_HOME) on a free port. `--slim`
names a virtualenv holding only the slim client (`uv venv DIR && uv pip install
--compile-bytecode --python DIR/bin/python work-ledger`, or the wheel); its size and its
verbs are measured beside this environment's, and `--baseline VENV`'s verbs (another
version's) beside both. Whether each environment holds compiled bytecode is reported with
its start-up: without it (and with PYTHONDONTWRITEBYTECODE set) every run compiles every
module it imports. Prints a markdown table and writes bench/results/agents-<time>.json.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import httpx
import psutil
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client

import mcp
from bench.harness import free_port

HERE = Path(__file__).parent
BIN = Path(sys.executable).parent
MB = 1024 * 1024


def rss_mb(pid: int) -> float:
    return psutil.Process(pid).memory_info().rss / MB


def peak_rss_mb(pid: int) -> float:
    """The process's RSS high-water mark so far (VmHWM), not just its RSS at this instant."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024 / MB
    return rss_mb(pid)


def cpu_seconds(pid: int) -> float:
    times = psutil.Process(pid).cpu_times()
    return times.user + times.system


def tree_bytes(path: Path, *, bytecode: bool) -> int:
    """The size of the files under `path`: the compiled bytecode (.pyc) only, or all else."""
    return sum(
        p.stat().st_size
        for p in path.rglob("*")
        if p.is_file() and not p.is_symlink() and (p.suffix == ".pyc") == bytecode
    )


def spawn_serve(home: Path, port: int) -> subprocess.Popen[bytes]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    env.update(WL_HOME=str(home), WL_SECRET="bench-agents-secret")
    with open(home / "serve.log", "wb") as log:
        return subprocess.Popen(
            [str(BIN / "work-ledger"), "serve", "--port", str(port)],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )


async def start_serve(home: Path) -> tuple[subprocess.Popen[bytes], str, str]:
    port = free_port()
    proc = spawn_serve(home, port)
    url = f"http://127.0.0.1:{port}"
    async with httpx.AsyncClient(base_url=url) as http:
        for _ in range(600):
            with contextlib.suppress(httpx.HTTPError):
                if (await http.get("/readyz")).status_code == 200:
                    token = (home / "operator.token").read_text().strip()
                    return proc, url, token
            await asyncio.sleep(0.1)
    raise SystemExit(f"serve did not start; see {home / 'serve.log'}")


@contextlib.asynccontextmanager
async def mcp_session(url: str, token: str, agent: str) -> Any:
    headers = {"Authorization": f"Bearer {token}", "X-WL-Agent": agent}
    async with (
        create_mcp_http_client(headers=headers) as http,
        mcp.Client(streamable_http_client(f"{url}/mcp", http_client=http), mode="legacy") as s,
    ):
        yield s


async def idle_sessions(pid: int, url: str, token: str, count: int) -> dict[str, float]:
    """Server RSS before and after `count` idle sessions (each with its GET stream) open."""
    async with mcp_session(url, token, "operator/warm") as warm:
        await warm.list_tools()
        await warm.call_tool("show", {"unit": "bench/show"})
    await asyncio.sleep(1)
    before = rss_mb(pid)
    async with contextlib.AsyncExitStack() as stack:
        for i in range(count):
            session = await stack.enter_async_context(mcp_session(url, token, f"operator/s{i}"))
            await session.list_tools()
        await asyncio.sleep(3)
        during = rss_mb(pid)
    await asyncio.sleep(2)
    return {
        "rss_before_mb": before,
        "rss_with_sessions_mb": during,
        "rss_after_close_mb": rss_mb(pid),
        "growth_per_session_mb": (during - before) / count,
    }


async def cpu_per_call(pid: int, url: str, token: str, calls: int) -> dict[str, float]:
    """Server CPU per `show` tool call over MCP, and per GET /units/{unit} over REST."""
    async with mcp_session(url, token, "operator/cpu") as session:
        for _ in range(20):
            await session.call_tool("show", {"unit": "bench/show"})
        start = cpu_seconds(pid)
        for _ in range(calls):
            await session.call_tool("show", {"unit": "bench/show"})
        over_mcp = (cpu_seconds(pid) - start) / calls
    headers = {"Authorization": f"Bearer {token}"}
    async with httpx.AsyncClient(base_url=url, headers=headers) as http:
        for _ in range(20):
            (await http.get("/units/bench/show")).raise_for_status()
        start = cpu_seconds(pid)
        for _ in range(calls):
            (await http.get("/units/bench/show")).raise_for_status()
        over_rest = (cpu_seconds(pid) - start) / calls
    return {
        "mcp_ms_per_call": over_mcp * 1000,
        "rest_ms_per_call": over_rest * 1000,
        "mcp_over_rest": over_mcp / over_rest,
    }


def verb_env(url: str, token: str, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("WL_")}
    env.update(WL_URL=url, WL_TOKEN=token, **extra)
    return env


def show_seconds(bindir: Path, url: str, token: str, runs: int = 11) -> tuple[float, float]:
    """Median wall time and CPU time of `work-ledger show X --json`, process start to exit.
    The CPU time is the one to compare across runs on a shared machine."""
    walls, cpus = [], []
    for _ in range(runs):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        started = time.perf_counter()
        subprocess.run(
            [str(bindir / "work-ledger"), "show", "bench/show", "--json"],
            env=verb_env(url, token),
            check=True,
            capture_output=True,
        )
        walls.append(time.perf_counter() - started)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        cpus.append(after.ru_utime + after.ru_stime - before.ru_utime - before.ru_stime)
    return statistics.median(walls), statistics.median(cpus)


def run_wrapper_rss(bindir: Path, url: str, token: str, agent: str) -> float:
    """Peak RSS of a `work-ledger run -- sleep 3` wrapper (not of its command)."""
    proc = subprocess.Popen(
        [str(bindir / "work-ledger"), "run", "--", "sleep", "3"],
        env=verb_env(url, token, WL_AGENT=agent),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    peak = 0.0
    while proc.poll() is None:
        with contextlib.suppress(psutil.Error):
            peak = max(peak, peak_rss_mb(proc.pid))
        time.sleep(0.05)
    return peak


def register(url: str, token: str, refs: list[str]) -> None:
    units = [{"external_ref": ref, "fleet": "bench"} for ref in refs]
    headers = {"Authorization": f"Bearer {token}"}
    httpx.post(f"{url}/units", json={"units": units}, headers=headers).raise_for_status()


def site_packages(venv: Path) -> Path:
    return next(venv.glob("lib/python*/site-packages"))


def has_bytecode(bindir: Path) -> bool:
    """Whether the environment's packages (httpx, the bulk of a verb's imports) were compiled
    to bytecode: pip does it on install, uv when asked (--compile-bytecode)."""
    return any((site_packages(bindir.parent) / "httpx").glob("__pycache__/*.pyc"))


async def measure(args: argparse.Namespace, home: Path) -> dict[str, Any]:
    proc, url, token = await start_serve(home)
    try:
        register(url, token, ["bench/show", "bench/run-1", "bench/run-2"])
        found: dict[str, Any] = {"sessions": args.sessions, "calls": args.calls}
        found["idle_sessions"] = await idle_sessions(proc.pid, url, token, args.sessions)
        found["cpu"] = await cpu_per_call(proc.pid, url, token, args.calls)
        envs = {"full": BIN}
        if args.slim:
            envs["slim"] = args.slim / "bin"
            packages = site_packages(args.slim)
            found["slim_install_mb"] = tree_bytes(packages, bytecode=False) / MB
            found["slim_bytecode_mb"] = tree_bytes(packages, bytecode=True) / MB
        if args.baseline:
            envs["baseline"] = args.baseline / "bin"
        for n, (name, bindir) in enumerate(envs.items(), start=1):
            wall, cpu = show_seconds(bindir, url, token)
            found[f"show_json_seconds_{name}"], found[f"show_json_cpu_{name}"] = wall, cpu
            found[f"run_rss_mb_{name}"] = run_wrapper_rss(bindir, url, token, f"operator/r{n}")
            found[f"bytecode_{name}"] = has_bytecode(bindir)
        return found
    finally:
        proc.terminate()
        proc.wait(timeout=60)


def table(found: dict[str, Any]) -> str:
    idle, cpu = found["idle_sessions"], found["cpu"]
    rows = [
        (
            f"server RSS growth per idle MCP session ({found['sessions']} sessions)",
            f"{idle['growth_per_session_mb']:.2f} MB "
            f"({idle['rss_before_mb']:.0f} → {idle['rss_with_sessions_mb']:.0f} MB)",
        ),
        (
            "server CPU per `show` tool call over MCP / same GET over REST",
            f"{cpu['mcp_ms_per_call']:.2f} ms / {cpu['rest_ms_per_call']:.2f} ms "
            f"({cpu['mcp_over_rest']:.1f}x)",
        ),
    ]
    if "slim_install_mb" in found:
        rows.append(
            (
                "slim client install (site-packages, without / only its bytecode)",
                f"{found['slim_install_mb']:.1f} MB / {found['slim_bytecode_mb']:.1f} MB",
            )
        )
    for name in ("slim", "full", "baseline"):
        if f"show_json_seconds_{name}" in found:
            rows.append(
                (
                    f"`work-ledger show X --json` end to end ({name} install, "
                    f"{'' if found.get(f'bytecode_{name}') else 'no '}bytecode, median)",
                    f"{found[f'show_json_seconds_{name}'] * 1000:.0f} ms wall, "
                    f"{found[f'show_json_cpu_{name}'] * 1000:.0f} ms CPU",
                )
            )
            rows.append(
                (
                    f"`run` wrapper peak RSS ({name} install)",
                    f"{found[f'run_rss_mb_{name}']:.1f} MB",
                )
            )
    return "\n".join(["| figure | measured |", "|---|---|"] + [f"| {a} | {b} |" for a, b in rows])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slim", type=Path, help="a virtualenv holding only the slim client")
    parser.add_argument(
        "--baseline", type=Path, help="a virtualenv of another version, whose verbs to time too"
    )
    parser.add_argument("--sessions", type=int, default=64)
    parser.add_argument("--calls", type=int, default=200)
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="wl-bench-agents-") as home:
        found = asyncio.run(measure(args, Path(home)))
    found["at"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
    found["load_average"] = os.getloadavg()
    out = HERE / "results" / f"agents-{time.strftime('%Y%m%dT%H%M%SZ', time.gmtime())}.json"
    out.write_text(json.dumps(found, indent=2) + "\n")
    print(table(found))
    print(f"\nload average at the end: {found['load_average'][0]:.1f} (cores: {os.cpu_count()})")
    print(f"\n(written to {out.relative_to(HERE.parent)})")


if __name__ == "__main__":
    main()
