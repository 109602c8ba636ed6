"""work-ledger benchmark: every lasting goal of the project a section, in one run.

    uv run --group bench python -m bench.run            # the core sections (tens of minutes)
    uv run --group bench python -m bench.run --quick    # smaller sizes, one pass in minutes
    uv run --group bench python -m bench.run --smoke    # tiny: keeps the script alive
    uv run --group bench python -m bench.run --sections all --quick   # every section

Starts its own PostgreSQL (the embedded server in a temporary directory, or the server of
WL_DATABASE_URL), gives every measured window a fresh database, and writes the raw JSON
and a Markdown table (bench/README.md says what each figure means).
"""

from __future__ import annotations

import argparse
import asyncio
import atexit
import datetime as dt
import json
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench import ab, claims, diagnose, endurance, fleet, goals, httpbench, report, scale
from bench.harness import Server, load_average, measure, median_of, server_url
from work_ledger.db.connect import with_database
from work_ledger.runtime import migrate_database

HERE = Path(__file__).resolve().parent
try:
    import pgqueuer  # noqa: F401  (only asks whether the peer is installed)

    HAVE_PGQUEUER = True
except ImportError:  # the `bench` dependency group is not installed: skip the peer
    HAVE_PGQUEUER = False
TEMPLATES = {"ledger": "bench_tpl_ledger", "bare": "bench_tpl_bare", "pgqueuer": "bench_tpl_pgq"}
CORE = "claims,diagnostics,scale,http,longpoll,soak"
MORE = "fleet,limits"  # in-process sections outside the core
# Sections that are programs of their own (their own servers or processes, their own JSON
# in bench/results/), run as `python -m MODULE ARGS` at the mode's sizes:
# name: (module and arguments; full, --quick and --smoke sizes).
PROGRAMS: dict[str, tuple[list[str], list[str], list[str], list[str]]] = {
    "shape": (["bench.shape"], [], ["--units", "100000", "--claims", "500", "--rounds", "1"],
              ["--units", "2000", "--claims", "50", "--rounds", "1"]),
    "register": (["bench.shape", "register"], [], ["--units", "10000", "--rounds", "1"],
                 ["--units", "1000", "--rounds", "1"]),
    "readside_write": (["bench.readside", "write"], [], ["--windows", "2"], ["--windows", "1"]),
    "walmirror": (["bench.ha", "walmirror"], [], ["--rounds", "1", "--seconds", "5"],
                  ["--rounds", "1", "--seconds", "1"]),
    "temporal": (["bench.temporal_follow"], [], ["--burst", "200", "--closed", "1000"],
                 ["--burst", "20", "--closed", ""]),
    "agents": (["bench.agents"], [], ["--sessions", "16", "--calls", "50"],
               ["--sessions", "4", "--calls", "10"]),
    "backup": (["bench.ha", "backup"], [], ["--units", "100000"], ["--units", "1000"]),
    # failover's smoke keeps the 3 s of load: with 1 s its cut-off claim found no holder.
    "failover": (["bench.ha", "failover"], [], ["--rounds", "1"], ["--rounds", "1"]),
}  # fmt: skip


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    p.add_argument("--concurrency", default="1,16,64,256", help="comma-separated worker counts")
    p.add_argument("--reps", type=int, default=3, help="repetitions per figure (median taken)")
    p.add_argument("--warmup", type=float, default=1.0, help="seconds run before each window")
    p.add_argument("--duration", type=float, default=4.0, help="seconds in each timed window")
    p.add_argument("--configs", default="", help="comma-separated claim configs (default all)")
    p.add_argument(
        "--sections",
        default=CORE,
        help=f"which sections to run: any of {CORE},{MORE},{','.join(PROGRAMS)}; or all",
    )
    p.add_argument("--soak-lives", type=int, default=0, help="soak size (default by mode)")
    p.add_argument("--events", type=int, default=0, help="event-log size (default by mode)")
    p.add_argument("--quick", action="store_true", help="smaller sizes (documented in README)")
    p.add_argument("--smoke", action="store_true", help="tiny sizes, c=1,16, one repetition")
    p.add_argument("--against", default="", help="A/B: this build against git revision REV")
    p.add_argument("--life", action="store_true", help="--against: the life, not claim+start")
    p.add_argument("--keyed", action="store_true", help="--against: keyed requests")
    p.add_argument("--out", default=str(HERE / "results"), help="where the JSON goes")
    p.add_argument("--markdown", default="", help="also write the Markdown table here")
    args = p.parse_args(argv)
    if args.smoke:
        args.concurrency, args.reps, args.warmup, args.duration = "1,16", 1, 0.2, 0.5
        args.quick = True
    elif args.quick:
        args.warmup, args.duration = min(args.warmup, 0.5), min(args.duration, 2.0)
    args.backlog_divisor = 10 if args.smoke else 4 if args.quick else 1
    args.levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    sections = f"{CORE},{MORE}," + ",".join(PROGRAMS) if args.sections == "all" else args.sections
    args.section_set = {x.strip() for x in sections.split(",") if x.strip()}
    return args


async def admin_server() -> Server:
    home = Path(tempfile.mkdtemp(prefix="wl-bench-"))
    # Registered before the server starts, so it runs after the server has stopped.
    atexit.register(shutil.rmtree, home, True)
    return await Server.attach(server_url(home))


async def build_templates(server: Server) -> None:
    conn = await asyncpg.connect(server.admin_url)
    try:
        for name in TEMPLATES.values():
            await conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')
            await conn.execute(f'CREATE DATABASE "{name}"')
    finally:
        await conn.close()
    await migrate_database(with_database(server.admin_url, TEMPLATES["ledger"]))
    if not HAVE_PGQUEUER:
        return
    from pgqueuer.queries import Queries

    pgq = await asyncpg.connect(with_database(server.admin_url, TEMPLATES["pgqueuer"]))
    try:
        await Queries.from_asyncpg_connection(pgq).install()
    finally:
        await pgq.close()


async def one_window(
    server: Server, config: claims.Config, c: int, args: argparse.Namespace
) -> dict[str, Any]:
    """Seed a fresh database, run the config's workers, time one window."""
    backlog = config.backlog // args.backlog_divisor
    for _attempt in range(3):
        async with server.fresh_database(config.name, TEMPLATES[config.template]) as url:
            seed = await asyncpg.connect(url)
            try:
                await config.seed(seed, backlog)
                if config.db_setup:
                    await seed.execute(config.db_setup)
            finally:
                await seed.close()
            async with config.workers(url, c) as operations:
                sample = await measure(
                    operations, server=server, warmup=args.warmup, duration=args.duration
                )
        if not sample.exhausted:
            break
        backlog *= 2  # the window ran dry: measure again with a deeper backlog
    summary = sample.summary()
    summary["backlog"] = backlog
    return summary


async def run_claims(
    server: Server,
    args: argparse.Namespace,
    configs: list[claims.Config],
    levels: list[int],
) -> dict[str, Any]:
    runs: dict[str, dict[int, list[dict[str, Any]]]] = {c.name: {} for c in configs}
    # Repetition outermost, configurations innermost: a burst of load from elsewhere on the
    # machine hits every configuration of a repetition alike, so the ratios hold.
    for rep in range(args.reps):
        for c in levels:
            for config in configs:
                t0 = time.perf_counter()
                s = await one_window(server, config, c, args)
                runs[config.name].setdefault(c, []).append(s)
                print(
                    f"rep {rep + 1} c={c:<3} {config.name:<24} {s['items_per_s']:>8.0f}/s "
                    f"p50 {fmt(s['claim_p50_ms'])} p99 {fmt(s['claim_p99_ms'])} ms "
                    f"cpu client {s['client_cpu_pct']}% server {s['server_cpu_pct']}% "
                    f"other {s['other_cpu_pct']}% ({time.perf_counter() - t0:.1f}s)",
                    flush=True,
                )
    return {
        "configs": {c.name: {"loop": c.loop} for c in configs},
        "runs": {name: {str(c): v for c, v in by_c.items()} for name, by_c in runs.items()},
        "median": {
            name: {str(c): median_of(v) for c, v in by_c.items()} for name, by_c in runs.items()
        },
    }


async def run_scale(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    if args.smoke:
        sizes, events = {"small": 100, "large": 2_000}, 20_000
    elif args.quick:
        sizes, events = {"small": 1_000, "large": 100_000}, 1_000_000
    else:
        sizes, events = {"small": 1_000, "large": 1_000_000}, 10_000_000
    out: dict[str, Any] = {}
    out["claim"] = await scale.claim_by_backlog(server, TEMPLATES["ledger"], sizes, args)
    events = args.events or events
    out["events"] = await scale.event_pages(server, TEMPLATES["ledger"], events, args.reps)
    return out


def fmt(x: float | None) -> str:
    return "-" if x is None else f"{x:.2f}"


def product_version() -> dict[str, Any]:
    """The commit measured, and whether the product's files differed from it."""

    def git(*cmd: str) -> str:
        done = subprocess.run(
            ["git", *cmd], cwd=HERE.parent, capture_output=True, text=True, check=False
        )
        return done.stdout.strip()

    return {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_in_src": git("status", "--porcelain", "--", "src"),
        "pgqueuer": _version("pgqueuer"),
    }


def _version(package: str) -> str | None:
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version(package)
    except PackageNotFoundError:
        return None


def machine() -> dict[str, Any]:
    model = ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    return {
        "cpu_model": model,
        "logical_cpus": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(),
        "python": platform.python_version(),
        "asyncpg": asyncpg.__version__,
    }


async def main(args: argparse.Namespace) -> dict[str, Any]:
    started = dt.datetime.now(dt.UTC)
    if args.against:
        return {
            "started_at": started.isoformat(timespec="seconds"),
            "command": " ".join(["python", "-m", "bench.run", *sys.argv[1:]]),
            "machine": machine(),
            "product": product_version(),
            "against": await ab.against(args.against, args),
            "finished_at": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
        }
    server = await admin_server()
    await build_templates(server)
    result: dict[str, Any] = {
        "started_at": started.isoformat(timespec="seconds"),
        "command": " ".join(["python", "-m", "bench.run", *sys.argv[1:]]),
        "options": {
            k: v
            for k, v in vars(args).items()
            if k not in ("levels", "section_set", "backlog_divisor")
        },
        "machine": machine(),
        "product": product_version(),
        "postgres": await server.settings(),
        "load_average_start": load_average(),
    }
    print(f"PostgreSQL {result['postgres'].get('server_version')}; {result['machine']}", flush=True)
    wanted = {x for x in args.configs.split(",") if x}
    if "claims" in args.section_set:
        configs = [c for c in claims.CONFIGS if not wanted or c.name in wanted]
        configs = [c for c in configs if HAVE_PGQUEUER or c.template != "pgqueuer"]
        result["claims"] = await run_claims(server, args, configs, args.levels)
        checkpoint(result, args)
    if "diagnostics" in args.section_set:
        levels = [c for c in args.levels if c <= 64][:2] or args.levels[:1]
        configs = [c for c in diagnose.DIAGNOSTICS if not wanted or c.name in wanted]
        result["diagnostics"] = await run_claims(server, args, configs, levels)
        result["diagnostics"]["plans"] = await diagnose.claim_plans(server, TEMPLATES["ledger"])
        checkpoint(result, args)
    if args.section_set & {"http", "longpoll", "fleet", "limits"}:
        home = Path(tempfile.mkdtemp(prefix="wl-bench-http-"))
        atexit.register(shutil.rmtree, home, True)
        waiters = 50 if args.smoke else 1000
        # A token per worker, waiter and agent: minted only as many as the sections use.
        agents = max(fleet.sizes(args)["fleets"]) if "fleet" in args.section_set else 0
        waiters_minted = waiters if "longpoll" in args.section_set else 0
        tokens = await httpbench.build_token_template(
            server, max(*args.levels, waiters_minted, agents), home
        )
    if "http" in args.section_set:
        result["http"] = await httpbench.run(server, args, args.levels, tokens, home)
        checkpoint(result, args)
    if "longpoll" in args.section_set:
        rounds, per_round = (4, 5) if args.smoke else (20, 10)
        result["longpoll"] = await endurance.longpoll(
            server, tokens, waiters, rounds, per_round, home
        )
    if "fleet" in args.section_set:
        result["fleet"] = await fleet.run(server, args, tokens, home)
        checkpoint(result, args)
    if "limits" in args.section_set:
        stalled = 20 if args.smoke else 200 if args.quick else 1000
        result["limits"] = await endurance.limits(server, stalled, home)
        checkpoint(result, args)
    if "soak" in args.section_set:
        lives = args.soak_lives or (2_000 if args.smoke else 20_000 if args.quick else 200_000)
        result["soak"] = await endurance.soak(server, TEMPLATES["ledger"], lives, 16)
        checkpoint(result, args)
    if "scale" in args.section_set:
        result["scale"] = await run_scale(server, args)
    for name in PROGRAMS:
        if name in args.section_set:
            result.setdefault("programs", {})[name] = run_program(name, args)
            checkpoint(result, args)
    result["load_average_end"] = load_average()
    result["finished_at"] = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    result["goals"] = goals.evaluate(result, args.levels)
    result["ratios"] = goals.cost_ratios(result, args.levels)
    return result


def run_program(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One section that is a program of its own, at the mode's sizes; what it printed."""
    command, full, quick, smoke = PROGRAMS[name]
    argv = [*command, *(smoke if args.smoke else quick if args.quick else full)]
    print(f"section {name}: python -m {' '.join(argv)}", flush=True)
    # bench.ha (backup, failover, walmirror) reuses the test suite's helpers (`support`).
    paths = [str(HERE.parent / "tests"), os.environ.get("PYTHONPATH", "")]
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in paths if p))
    started = time.monotonic()
    done = subprocess.run(
        [sys.executable, "-m", *argv], cwd=HERE.parent, env=env, capture_output=True, text=True
    )
    print(done.stdout[-3000:], done.stderr[-2000:] if done.returncode else "", flush=True)
    return {
        "command": "python -m " + " ".join(argv),
        "exit": done.returncode,
        "seconds": round(time.monotonic() - started, 1),
        "output": done.stdout.splitlines()[-60:],
        "errors": done.stderr.splitlines()[-20:] if done.returncode else [],
    }


def checkpoint(result: dict[str, Any], args: argparse.Namespace) -> None:
    """The sections measured so far, so that a late failure loses nothing before it."""
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "partial.json").write_text(json.dumps(result, default=str) + "\n", encoding="utf-8")


def write_outputs(result: dict[str, Any], args: argparse.Namespace) -> Path:
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    suffix = "-smoke" if args.smoke else "-quick" if args.quick else ""
    stamp = result["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    path = out / f"run-{stamp}{suffix}.json"
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (out / "partial.json").unlink(missing_ok=True)
    text = report.markdown(result, path.name)
    if args.markdown:
        Path(args.markdown).write_text(text, encoding="utf-8")
    print(text)
    print(f"raw results: {path}")
    return path


if __name__ == "__main__":
    arguments = parse_args()
    write_outputs(asyncio.run(main(arguments)), arguments)
