import { describe, expect, test } from "vitest";
import {
  AttemptSuperseded,
  InvariantViolation,
  RateLimited,
  Unavailable,
  Unreachable,
  WorkLedger,
} from "../../src/index.js";
import { CLAIM, ok, problem, scripted, sleeps } from "./scripted.js";

const KEY = "Idempotency-Key";
const IN_FLIGHT = { invariant: "idempotency_key_in_flight", unit_id: null, state: null, allowed: [] };

function client(
  fetch: ReturnType<typeof scripted>["fetch"],
  url: string | string[] = "http://a:1",
  retries = 4,
) {
  const { sleep, delays } = sleeps();
  const wl = new WorkLedger({ url, token: "wl_t_s", fetch, sleep, retries, random: () => 0.5 });
  return { wl, delays };
}

describe("one Idempotency-Key per logical write", () => {
  test("every retry of a write repeats its key", async () => {
    const { fetch, sent } = scripted(problem(503, "unavailable"), new TypeError("fetch failed"), ok(CLAIM));
    const { wl } = client(fetch);
    expect((await wl.claims.next({ domain: "orders" })).attempt?.id).toBe("a1");
    expect(sent).toHaveLength(3);
    const keys = new Set(sent.map((s) => s.headers[KEY]));
    expect(keys.size).toBe(1);
    expect([...keys][0]).toMatch(/^[0-9a-f-]{36}$/);
  });

  test("two writes carry two keys; a key given by the caller is used as is", async () => {
    const { fetch, sent } = scripted(ok(CLAIM), ok(CLAIM), ok(CLAIM));
    const { wl } = client(fetch);
    await wl.claims.next();
    await wl.claims.next();
    await wl.claims.next({}, { key: "claim-7" });
    expect(sent[0]?.headers[KEY]).not.toBe(sent[1]?.headers[KEY]);
    expect(sent[2]?.headers[KEY]).toBe("claim-7");
  });

  test("a read carries no key", async () => {
    const { fetch, sent } = scripted(ok({ items: [], next_cursor: null }));
    await client(fetch).wl.units.list({ state: "ready" });
    expect(sent[0]?.headers[KEY]).toBeUndefined();
    expect(sent[0]?.url).toBe("http://a:1/units?state=ready");
  });
});

describe("failover over a URL list", () => {
  test("a network error moves the write to the next replica at once, same key", async () => {
    const { fetch, sent } = scripted(new TypeError("ECONNREFUSED"), ok(CLAIM));
    const { wl, delays } = client(fetch, "http://a:1, http://b:2");
    await wl.claims.next();
    expect(sent.map((s) => new URL(s.url).host)).toEqual(["a:1", "b:2"]);
    expect(sent[0]?.headers[KEY]).toBe(sent[1]?.headers[KEY]);
    expect(delays).toEqual([0]);
    expect(wl.url).toBe("http://b:2");
  });

  test("a 503 moves too, and the client sticks to the replica that answered", async () => {
    const { fetch, sent } = scripted(problem(503, "unavailable"), ok(CLAIM), ok(CLAIM));
    const { wl } = client(fetch, ["http://a:1", "http://b:2"]);
    await wl.claims.next();
    await wl.claims.next();
    expect(sent.map((s) => new URL(s.url).host)).toEqual(["a:1", "b:2", "b:2"]);
  });

  test("after every URL failed in a row it backs off, then raises Unreachable", async () => {
    const down = () => new TypeError("fetch failed");
    const { fetch, sent } = scripted(down(), down(), down(), down());
    const { wl, delays } = client(fetch, ["http://a:1", "http://b:2"], 1);
    const error = await wl.units.get("orders/refunds").catch((e: unknown) => e);
    expect(error).toBeInstanceOf(Unreachable);
    expect(error).toBeInstanceOf(Unavailable);
    expect(sent).toHaveLength(4);
    expect(delays).toEqual([0, 150, 0]);
  });
});

describe("the two 409s", () => {
  test("the in-flight 409 is retried with the same key, honoring Retry-After", async () => {
    const { fetch, sent } = scripted(
      problem(409, "invariant_violation", IN_FLIGHT, { "Retry-After": "1" }),
      ok(CLAIM),
    );
    const { wl, delays } = client(fetch);
    await wl.claims.next();
    expect(sent).toHaveLength(2);
    expect(sent[0]?.headers[KEY]).toBe(sent[1]?.headers[KEY]);
    expect(delays).toEqual([1000]);
  });

  test("an invariant's 409 is a stop: raised at once, never retried", async () => {
    const refusal = { invariant: "attempt_superseded", unit_id: "u1", state: "claimed", allowed: ["claim"] };
    const { fetch, sent } = scripted(problem(409, "attempt_superseded", refusal));
    const error = await client(fetch)
      .wl.units.start("u1", { attempt_id: "a0" })
      .catch((e: unknown) => e);
    expect(sent).toHaveLength(1);
    expect(error).toBeInstanceOf(AttemptSuperseded);
    expect(error).toBeInstanceOf(InvariantViolation);
    const e = error as AttemptSuperseded;
    expect([e.status, e.code, e.invariant, e.unitId, e.state, e.allowed]).toEqual([
      409,
      "attempt_superseded",
      "attempt_superseded",
      "u1",
      "claimed",
      ["claim"],
    ]);
  });
});

describe("Retry-After", () => {
  test("a 429 waits at least Retry-After, on the same URL", async () => {
    const { fetch, sent } = scripted(
      problem(429, "rate_limited", {}, { "Retry-After": "3" }),
      ok({ items: [], next_cursor: null }),
    );
    const { wl, delays } = client(fetch, ["http://a:1", "http://b:2"]);
    await wl.events.list();
    expect(delays).toEqual([3000]);
    expect(sent.map((s) => new URL(s.url).host)).toEqual(["a:1", "a:1"]);
  });

  test("a 503 of the only URL waits Retry-After rather than the shorter back-off", async () => {
    const { fetch } = scripted(problem(503, "unavailable", {}, { "Retry-After": "2" }), ok({ status: "ok" }));
    const { wl, delays } = client(fetch);
    await wl.health.readyz();
    expect(delays).toEqual([2000]);
  });

  test("the last retryable answer is raised as its error", async () => {
    const limited = () => problem(429, "rate_limited", {}, { "Retry-After": "1" });
    const { fetch, sent } = scripted(limited(), limited());
    const error = await client(fetch, "http://a:1", 1)
      .wl.budgets.list()
      .catch((e: unknown) => e);
    expect(error).toBeInstanceOf(RateLimited);
    expect(sent).toHaveLength(2);
  });
});
