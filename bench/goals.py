"""The issue's goals, computed as ratios of figures measured in the same run."""

from __future__ import annotations

from typing import Any


def _get(result: dict[str, Any], *path: str) -> Any:
    node: Any = result
    for key in path:
        if not isinstance(node, dict) or key not in node:
            return None
        node = node[key]
    return node


def _goal(name: str, value: float | None, op: str, bound: float, how: str) -> dict[str, Any]:
    if value is None:
        verdict = "NOT MEASURED"
    elif op == ">=":
        verdict = "PASS" if value >= bound else "FAIL"
    else:
        verdict = "PASS" if value <= bound else "FAIL"
    return {
        "goal": name,
        "value": None if value is None else round(value, 3),
        "bound": f"{op} {bound}",
        "verdict": verdict,
        "how": how,
    }


def _ratio(a: float | None, b: float | None) -> float | None:
    return None if a is None or b is None or b == 0 else a / b


def evaluate(result: dict[str, Any], levels: list[int]) -> list[dict[str, Any]]:
    med = _get(result, "claims", "median") or {}
    out = []
    for c in levels:
        k = str(c)
        for ours, limit in (
            ("service_claim", "raw_ledger_claim"),
            ("service_claim_finish", "raw_ledger_claim_finish"),
            ("service_life", "raw_ledger_life"),
        ):
            value = _ratio(_get(med, ours, k, "items_per_s"), _get(med, limit, k, "items_per_s"))
            out.append(
                _goal(
                    f"{ours} ≥ 0.9x {limit} (c={c})",
                    value,
                    ">=",
                    0.9,
                    f"items/s of {ours} ÷ items/s of {limit}, medians",
                )
            )
        if c in (16, 64):  # issue 38: flow controls that stop none of the backlog
            controlled = _ratio(
                _get(med, "ledger_sql_claim_controls", k, "items_per_s"),
                _get(med, "ledger_sql_claim", k, "items_per_s"),
            )
            out.append(
                _goal(
                    f"pull-next with keys, caps and pauses elsewhere ≥ 0.9x without (c={c})",
                    controlled,
                    ">=",
                    0.9,
                    "items/s of ledger_sql_claim_controls ÷ items/s of ledger_sql_claim, medians",
                )
            )
        pull_next = _ratio(
            _get(med, "ledger_sql_claim", k, "items_per_s"),
            _get(med, "raw_ledger_claim", k, "items_per_s"),
        )
        out.append(
            _goal(
                f"product pull-next SQL ≥ 0.85x hand-written claim CTE (c={c})",
                pull_next,
                ">=",
                0.85,
                "items/s of ledger_sql_claim ÷ items/s of raw_ledger_claim, medians",
            )
        )
    http = _get(result, "http", "median") or {}
    for c in (x for x in levels if x in (16, 64)):
        k = str(c)
        for ours, base, what, floor in (
            # Issue 43: unkeyed ≥ 0.8, keyed (as agents send) ≥ 0.7.
            ("http_claim", "asgi_raw_claim", "HTTP claim+start ≥ 0.8x bare ASGI app", 0.8),
            ("http_claim_keyed", "asgi_raw_claim", "HTTP claim+start keyed ≥ 0.7x bare", 0.7),
            ("http_life", "asgi_raw_life", "HTTP life (5 requests) ≥ 0.8x bare ASGI app", 0.8),
            ("http_life_keyed", "asgi_raw_life", "HTTP life keyed ≥ 0.7x bare ASGI app", 0.7),
            ("http_claim_budget", "http_claim", "HTTP claim+start, 1,000 budgets ≥ 0.9x none", 0.9),
            ("http_claim_controls", "http_claim", "HTTP claim+start, controls ≥ 0.9x none", 0.9),
            ("http_life_by_model", "http_life", "HTTP life, cost by model ≥ 0.9x cents alone", 0.9),
        ):
            out.append(
                _goal(
                    f"{what} (c={c})",
                    _ratio(_get(http, ours, k, "items_per_s"), _get(http, base, k, "items_per_s")),
                    ">=",
                    floor,
                    f"items/s of {ours} ÷ items/s of {base}, same run",
                )
            )
        out.append(
            _goal(
                f"serve app CPU per claim+start ≤ 1.6x the bare app's (c={c})",
                _ratio(
                    _get(http, "http_claim", k, "app_cpu_ms_per_item"),
                    _get(http, "asgi_raw_claim", k, "app_cpu_ms_per_item"),
                ),
                "<=",
                1.6,
                "app CPU ms per item of http_claim ÷ that of asgi_raw_claim",
            )
        )
    out.append(
        _goal(
            "HTTP claim p99 ≤ 3x raw ledger-shaped statement p99 (c=64)",
            _ratio(
                _get(http, "http_claim", "64", "claim_p99_ms"),
                _get(med, "raw_ledger_claim", "64", "claim_p99_ms"),
            ),
            "<=",
            3.0,
            "claim p99 of http_claim ÷ claim p99 of raw_ledger_claim",
        )
    )
    out.append(
        _goal(
            "HTTP claim ≥ 1.5x PGQueuer QueueManager (c=64)",
            _ratio(
                _get(http, "http_claim", "64", "items_per_s"),
                _get(med, "pgqueuer_manager", "64", "items_per_s"),
            ),
            ">=",
            1.5,
            "items/s of http_claim ÷ items/s of pgqueuer_manager",
        )
    )
    scale = _get(result, "scale", "claim") or {}
    sizes = scale.get("sizes", {"small": 1000, "large": 1000000})
    out.append(
        _goal(
            f"claim p50 at {sizes['large']:,} ready ≤ 1.2x at {sizes['small']:,}",
            _ratio(_get(scale, "large", "claim_p50_ms"), _get(scale, "small", "claim_p50_ms")),
            "<=",
            1.2,
            "service claim p50 (c=1) with the large backlog ÷ with the small one",
        )
    )
    lp = _get(result, "longpoll") or {}
    out.append(_goal("long-poll wake-up p50 ≤ 50 ms", lp.get("wake_p50_ms"), "<=", 50, ""))
    out.append(
        _goal(
            "long-poll database connections ≤ 5",
            lp.get("db_connections_max"),
            "<=",
            5,
            "the server's open connections (application_name work-ledger), max over the run",
        )
    )
    out.append(_goal("long-poll server RSS ≤ 200 MB", lp.get("server_rss_mb_max"), "<=", 200, ""))
    soak = _get(result, "soak") or {}
    out.append(
        _goal(
            "soak: claim p50 last 10% ≤ 1.5x first 10%",
            _ratio(_get(soak, "last", "claim_p50_ms"), _get(soak, "first", "claim_p50_ms")),
            "<=",
            1.5,
            "claim p50 over the last tenth of the lives ÷ over the first tenth",
        )
    )
    return out + fleet_goals(result)


def fleet_goals(result: dict[str, Any]) -> list[dict[str, Any]]:
    """The largest fleet on one serve: no errors, and RSS and descriptors flat."""
    runs = [r for r in _get(result, "fleet", "runs") or [] if r["replicas"] == 1]
    if not runs:
        return []
    r = max(runs, key=lambda x: x["agents"])
    rss, fds = r["serve_rss_mb"], r["serve_fds"]
    flat = "median of the last third of the samples ÷ of the first third"
    return [
        _goal(f"fleet: {r['agents']} agents on one serve, errors = 0", r["errors"], "<=", 0,
              f"claim p99 {round(r['claim_p99_ms'] or 0, 1)} ms over {r['seconds']} s"),
        _goal("fleet: serve RSS flat (≤ 1.1x)", rss["flat"] and rss["flat"][0], "<=",
              1.1, flat),
        _goal("fleet: serve descriptors flat (≤ 1.2x)", fds["flat"] and fds["flat"][0],
              "<=", 1.2, flat),
    ]  # fmt: skip


PAIRS = [
    ("claims", "ledger_sql_claim", "raw_ledger_claim"),
    ("claims", "service_claim", "ledger_sql_claim"),
    ("claims", "service_claim", "raw_ledger_claim"),
    ("claims", "service_claim_finish", "raw_ledger_claim_finish"),
    ("claims", "service_life", "raw_ledger_life"),
    ("claims", "raw_ledger_claim", "raw_bare_claim"),
    ("http", "http_claim", "asgi_raw_claim"),
    ("http", "http_life", "asgi_raw_life"),
    ("http", "http_claim_keyed", "http_claim"),
    ("http", "http_life_keyed", "http_life"),
    ("http", "http_claim_budget", "http_claim"),
    ("http", "http_claim_controls", "http_claim"),
    ("http", "http_life_by_model", "http_life"),
]


def _cpu_per_item(m: dict[str, Any] | None) -> float | None:
    if not m:
        return None
    parts = [m.get(k) for k in ("client_cpu_ms_per_item", "server_cpu_ms_per_item")]
    parts.append(m.get("app_cpu_ms_per_item") or 0.0)
    return None if any(p is None for p in parts) else sum(parts)  # type: ignore[arg-type]


def cost_ratios(result: dict[str, Any], levels: list[int]) -> list[dict[str, Any]]:
    """Throughput and CPU-per-item ratios of each configuration against its limit.

    CPU per item (client + PostgreSQL + app) barely moves when other work competes for
    the cores, so it is the steadier of the two on a shared machine.
    """
    rows = []
    for section, ours, limit in PAIRS:
        med = _get(result, section, "median") or {}
        for c in levels:
            a, b = _get(med, ours, str(c)), _get(med, limit, str(c))
            if not a or not b:
                continue
            rows.append(
                {
                    "ours": ours,
                    "limit": limit,
                    "c": c,
                    "throughput_ratio": _ratio(a["items_per_s"], b["items_per_s"]),
                    "cpu_ms_per_item": _cpu_per_item(a),
                    "limit_cpu_ms_per_item": _cpu_per_item(b),
                    "cpu_ratio": _ratio(_cpu_per_item(a), _cpu_per_item(b)),
                }
            )
    return rows
