"""work-ledger benchmark: every lasting goal of the project a section, in one run
(bench/README.md). `python -m bench.run --help` lists the options."""

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
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import asyncpg
import psutil

from bench import agents, claims, endurance, httpbench, report
from bench.harness import (
    Server,
    build_token_template,
    deepening,
    measure,
    recreated,
    repetitions,
    server_url,
)
from work_ledger.db.connect import with_database
from work_ledger.runtime import migrate_database

HERE = Path(__file__).resolve().parent
# Without the `bench` dependency group there is no peer: its configurations are skipped.
HAVE_PGQUEUER = find_spec("pgqueuer") is not None
TEMPLATES = {"ledger": "bench_tpl_ledger", "bare": "bench_tpl_bare", "pgqueuer": "bench_tpl_pgq"}
CORE = "claims,diagnostics,scale,http,longpoll,soak"
SETTINGS = ["server_version", "max_connections", "shared_buffers", "synchronous_commit", "fsync",
            "full_page_writes", "wal_level", "checkpoint_timeout", "max_wal_size", "work_mem",
            "autovacuum", "autovacuum_naptime", "autovacuum_vacuum_scale_factor",
            "jit"]  # fmt: skip
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
    "temporal": (["bench.temporal_follow"], [], ["--burst", "200"], ["--burst", "20"]),
    "agents": (["bench.agents"], [], ["--sessions", "16", "--calls", "50"],
               ["--sessions", "4", "--calls", "10"]),
    "backup": (["bench.ha", "backup"], [], ["--units", "100000"], ["--units", "1000"]),
    # failover's smoke keeps the 3 s of load: with 1 s its cut-off claim found no holder.
    "failover": (["bench.ha", "failover"], [], ["--rounds", "1"], ["--rounds", "1"]),
}  # fmt: skip
# What a program needs beyond the `bench` group: an extra's module, a dev dependency's CLI.
NEEDS = {"temporal": ["temporalio", "bin/temporal"], "agents": ["mcp"]}


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


async def build_templates(server: Server) -> None:
    for name in TEMPLATES.values():
        await recreated(server.admin_url, name)
    await migrate_database(with_database(server.admin_url, TEMPLATES["ledger"]))
    if HAVE_PGQUEUER:
        from pgqueuer.queries import Queries

        pgq = await asyncpg.connect(with_database(server.admin_url, TEMPLATES["pgqueuer"]))
        await Queries.from_asyncpg_connection(pgq).install()
        await pgq.close()


async def run_claims(
    server: Server, args: argparse.Namespace, configs: list[claims.Config], levels: list[int]
) -> dict[str, Any]:
    by_name = {c.name: c for c in configs}

    async def window(name: str, c: int) -> dict[str, Any]:
        config = by_name[name]

        async def once(backlog: int) -> dict[str, Any]:
            async with server.fresh_database(name, TEMPLATES[config.template]) as url:
                seed = await asyncpg.connect(url)
                await config.seed(seed, backlog)
                if config.db_setup:
                    await claims.set_up(seed, config.db_setup)
                await seed.close()
                async with config.workers(url, c) as ops:
                    return await measure(
                        ops, server=server, warmup=args.warmup, duration=args.duration
                    )

        return await deepening(config.backlog // args.backlog_divisor, once)

    measured = await repetitions("claims", list(by_name), levels, args.reps, window)
    return {"configs": {c.name: {"loop": c.loop} for c in configs}, **measured}


def about() -> dict[str, Any]:
    """The machine, and the commit measured (and whether the product's files differed)."""
    from importlib.metadata import version

    def git(*cmd: str) -> str:
        done = subprocess.run(["git", *cmd], cwd=HERE.parent, capture_output=True, text=True)
        return done.stdout.strip()

    cpuinfo = Path("/proc/cpuinfo").read_text() if Path("/proc/cpuinfo").exists() else ""
    models = [
        x.split(":", 1)[1].strip() for x in cpuinfo.splitlines() if x.startswith("model name")
    ]
    machine = {
        "cpu_model": models[0] if models else "", "logical_cpus": psutil.cpu_count(),
        "memory_gb": round(psutil.virtual_memory().total / 2**30, 1),
        "os": platform.platform(), "python": platform.python_version(),
        "asyncpg": asyncpg.__version__,
    }  # fmt: skip
    product = {
        "commit": git("rev-parse", "--short", "HEAD"),
        "uncommitted_in_src": git("status", "--porcelain", "--", "src"),
        "pgqueuer": version("pgqueuer") if HAVE_PGQUEUER else None,
    }
    return {"command": " ".join(["python", "-m", "bench.run", *sys.argv[1:]]),
            "machine": machine, "product": product}  # fmt: skip


async def main(args: argparse.Namespace) -> dict[str, Any]:
    def now() -> str:
        return dt.datetime.now(dt.UTC).isoformat(timespec="seconds")

    result: dict[str, Any] = {"started_at": now(), **about()}
    if args.against:
        result["against"] = await httpbench.against(args.against, args)
        return {**result, "finished_at": now()}
    home = Path(tempfile.mkdtemp(prefix="wl-bench-"))
    # Registered before the server starts, so it runs after the server has stopped.
    atexit.register(shutil.rmtree, home, True)
    server = await Server.attach(server_url(home))
    await build_templates(server)
    hidden = ("levels", "section_set", "backlog_divisor")
    result["options"] = {k: v for k, v in vars(args).items() if k not in hidden}
    conn = await asyncpg.connect(server.admin_url)
    rows = await conn.fetch(
        "SELECT name, setting, unit FROM pg_settings WHERE name = ANY($1)", SETTINGS
    )
    await conn.close()
    result["postgres"] = {r["name"]: r["setting"] + (r["unit"] or "") for r in rows}
    result["load_average_start"] = os.getloadavg()
    print(f"PostgreSQL {result['postgres'].get('server_version')}; {result['machine']}", flush=True)
    wanted, sections = {x for x in args.configs.split(",") if x}, args.section_set

    async def section(name: str, measuring: Any) -> None:
        if name in sections:
            result[name] = await measuring
            checkpoint(result, args)
        else:
            measuring.close()  # never awaited: nothing ran

    if "claims" in sections:
        configs = [c for c in claims.CONFIGS if not wanted or c.name in wanted]
        configs = [c for c in configs if HAVE_PGQUEUER or c.template != "pgqueuer"]
        await section("claims", run_claims(server, args, configs, args.levels))
    levels = [c for c in args.levels if c <= 64][:2] or args.levels[:1]
    diagnostics = [c for c in claims.DIAGNOSTICS if not wanted or c.name in wanted]
    await section("diagnostics", run_claims(server, args, diagnostics, levels))
    if sections & {"http", "longpoll", "fleet", "limits"}:
        http_home = Path(tempfile.mkdtemp(prefix="wl-bench-http-"))
        atexit.register(shutil.rmtree, http_home, True)
        waiters = 50 if args.smoke else 1000
        # A token per worker, waiter and agent: minted only as many as the sections use.
        fleet = max(agents.sizes(args)[0]) if "fleet" in sections else 0
        minted = max(*args.levels, waiters if "longpoll" in sections else 0, fleet)
        tokens = await build_token_template(server, minted, http_home)
        await section("http", httpbench.run(server, args, args.levels, tokens, http_home))
        rounds, per_round = (4, 5) if args.smoke else (20, 10)
        polls = endurance.longpoll(server, tokens, waiters, rounds, per_round, http_home)
        await section("longpoll", polls)
        await section("fleet", agents.fleet(server, args, tokens, http_home))
        stalled = 20 if args.smoke else 200 if args.quick else 1000
        await section("limits", endurance.limits(server, stalled, http_home))
    lives = args.soak_lives or (2_000 if args.smoke else 20_000 if args.quick else 200_000)
    await section("soak", endurance.soak(server, TEMPLATES["ledger"], lives, 16))
    await section("scale", run_scale(server, args))
    for name in (p for p in PROGRAMS if p in sections):
        result.setdefault("programs", {})[name] = run_program(name, args)
        checkpoint(result, args)
    result["load_average_end"] = os.getloadavg()
    result["finished_at"] = now()
    result["goals"] = report.evaluate(result, args.levels)
    result["ratios"] = report.cost_ratios(result, args.levels)
    return result


async def run_scale(server: Server, args: argparse.Namespace) -> dict[str, Any]:
    if args.smoke:
        sizes, events = {"small": 100, "large": 2_000}, 20_000
    elif args.quick:
        sizes, events = {"small": 1_000, "large": 100_000}, 1_000_000
    else:
        sizes, events = {"small": 1_000, "large": 1_000_000}, 10_000_000
    template = TEMPLATES["ledger"]
    return {
        "claim": await endurance.claim_by_backlog(server, template, sizes, args),
        "events": await endurance.event_pages(server, template, args.events or events, args.reps),
    }


def run_program(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """One section that is a program of its own, at the mode's sizes; what it printed."""
    command, full, quick, smoke = PROGRAMS[name]
    argv = [*command, *(smoke if args.smoke else quick if args.quick else full)]
    bin_dir = Path(sys.executable).parent
    for need in NEEDS.get(name, []):
        if not ((bin_dir / need[4:]).exists() if need[:4] == "bin/" else find_spec(need)):
            why = f"skipped: {need} is not installed (uv sync --all-extras --all-groups)"
            print(f"section {name}: {why}", flush=True)
            return {"command": "python -m " + " ".join(argv), "exit": 0, "seconds": 0,
                    "output": [why], "errors": []}  # fmt: skip
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
    Path(args.out).mkdir(parents=True, exist_ok=True)
    (Path(args.out) / "partial.json").write_text(json.dumps(result, default=str) + "\n")


if __name__ == "__main__":
    arguments = parse_args()
    result = asyncio.run(main(arguments))
    suffix = "-smoke" if arguments.smoke else "-quick" if arguments.quick else ""
    stamp = result["started_at"].replace("+00:00", "Z").replace("-", "").replace(":", "")
    path = Path(arguments.out) / f"run-{stamp}{suffix}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result, indent=1, default=str) + "\n", encoding="utf-8")
    (Path(arguments.out) / "partial.json").unlink(missing_ok=True)
    text = report.markdown(result, path.name)
    if arguments.markdown:
        Path(arguments.markdown).write_text(text, encoding="utf-8")
    print(text, f"raw results: {path}", sep="\n")
