/**
 * Live scenarios against real `work-ledger serve` processes (two replicas on one
 * database, embedded PostgreSQL), started by tests/client/test_typescript_live.py, which
 * passes their URLs and tokens minted with `work-ledger token create` in WL_LIVE_*.
 */
import { describe, expect, test } from "vitest";
import { CapReached, InvariantViolation, WorkLedger, type Fetch } from "../../src/index.js";

const env = process.env;
const URLS = (env["WL_LIVE_URLS"] ?? "").split(",").filter(Boolean);
const [A, B] = URLS as [string, string];
const OPERATOR = env["WL_LIVE_OPERATOR"] ?? "";
const AGENT = env["WL_LIVE_AGENT"] ?? "";
// Sub-agents of the agent token are `principal/suffix` (each holds its own claim).
const PRINCIPAL = env["WL_LIVE_AGENT_PRINCIPAL"] ?? "";
const TRIAGE = env["WL_LIVE_TRIAGE"] ?? "";
const DEAD = env["WL_LIVE_DEAD_URL"] ?? "";
const RUN = env["WL_LIVE_RUN"] ?? String(process.pid);
const EVIDENCE = "https://ci.example.com/runs/";

const operator = () => new WorkLedger({ url: URLS, token: OPERATOR });
const agent = (name?: string) =>
  new WorkLedger({ url: URLS, token: AGENT, ...(name ? { agent: `${PRINCIPAL}/${name}` } : {}) });

// Real servers on a machine shared with other test runs: bounds 10x what a test takes alone.
describe.skipIf(URLS.length < 2)("against two real replicas", { timeout: 120_000 }, () => {
  test("a unit's whole life", async () => {
    const ref = `ts-${RUN}/life`;
    const op = operator();
    const ag = agent("life");
    const registered = await op.units.register([{ external_ref: ref, fleet: "ts", domain: `life-${RUN}` }]);
    expect(registered.created).toBe(1);
    const claim = await ag.claims.next({ domain: `life-${RUN}` });
    expect(claim.unit?.external_ref).toBe(ref);
    const attempt = claim.attempt!.id;
    await ag.units.start(ref, { attempt_id: attempt });
    await ag.attempts.heartbeat(attempt, { lease_seconds: 120 });
    await ag.attempts.recordCost(attempt, { cost_cents: 240, model: "claude-opus-4-8", input_tokens: 1200 });
    await ag.units.verify(ref, `${EVIDENCE}4242`, { attempt_id: attempt });
    const done = await ag.units.dispose(ref, { disposition: "MIGRATED", attempt_id: attempt });
    expect([done.unit.state, done.unit.disposition, done.unit.cost_cents]).toEqual(["done", "MIGRATED", 240]);
    const types: string[] = [];
    for await (const event of op.units.iterEvents(ref, { limit: 2 })) types.push(event.event_type);
    expect(types.reverse()).toEqual([
      "registered",
      "claimed",
      "transitioned",
      "heartbeat",
      "cost_recorded",
      "transitioned",
      "disposed",
    ]);
    const again = await ag.units.dispose(ref, { disposition: "DEAD" }).catch((e: unknown) => e);
    expect(again).toBeInstanceOf(InvariantViolation);
    expect((again as InvariantViolation).allowed).toEqual([]);
  });

  test("a cap refuses a named claim, and a bulk release frees the fleet", async () => {
    const fleet = `ts-flow-${RUN}`;
    const op = operator();
    const ag = agent("flow");
    const refs = [`ts-${RUN}/flow-1`, `ts-${RUN}/flow-2`];
    await op.units.register(refs.map((external_ref) => ({ external_ref, fleet, domain: "flow" })));
    const capped = await op.controls.set({ fleet, max_live: 1, reason: "ramp: one at a time" });
    expect([capped.max_live, capped.live]).toEqual([1, 0]);
    await ag.claims.unit(refs[0]!);
    const refused = await agent("flow-2")
      .claims.unit(refs[1]!)
      .catch((e: unknown) => e);
    expect(refused).toBeInstanceOf(CapReached);
    const listed = await op.controls.list();
    expect(listed.items.find((c) => c.fleet === fleet)?.live).toBe(1);
    const dry = await op.bulk.run({ filter: { fleet }, action: "release", reason: "bad model release" });
    expect([dry.dry_run, dry.changed.map((c) => c.external_ref)]).toEqual([true, [refs[0]]]);
    const real = await op.bulk.run({
      filter: { fleet },
      action: "release",
      reason: "bad model release",
      dry_run: false,
    });
    expect(real.changed.map((c) => [c.external_ref, c.to])).toEqual([[refs[0], "ready"]]);
    const events: string[] = [];
    for await (const e of op.controls.iterEvents({ limit: 50 })) {
      if (e.fleet === fleet) events.push(e.reason ?? "");
    }
    expect(events).toEqual(["ramp: one at a time"]);
  });

  test("16 racing claimers: every unit claimed once, none twice", async () => {
    const domain = `race-${RUN}`;
    const refs = Array.from({ length: 48 }, (_, i) => `ts-${RUN}/race-${i}`);
    await operator().units.register(refs.map((external_ref) => ({ external_ref, fleet: "ts", domain })));
    const claimedBy = new Map<string, string[]>();
    const claimer = async (i: number): Promise<void> => {
      const name = `racer-${i}`;
      const wl = new WorkLedger({
        url: i % 2 ? [B, A] : [A, B],
        token: AGENT,
        agent: `${PRINCIPAL}/${name}`,
      });
      for (;;) {
        const claim = await wl.claims.next({ domain });
        if (claim.unit === null || claim.attempt === null) return;
        const ref = claim.unit.external_ref;
        claimedBy.set(ref, [...(claimedBy.get(ref) ?? []), name]);
        const fence = { attempt_id: claim.attempt.id };
        await wl.units.start(ref, fence);
        await wl.units.verify(ref, `${EVIDENCE}${i}`, fence);
        await wl.units.dispose(ref, { disposition: "MIGRATED", ...fence });
      }
    };
    await Promise.all(Array.from({ length: 16 }, (_, i) => claimer(i)));
    const doubles = [...claimedBy].filter(([, by]) => by.length > 1);
    expect(doubles).toEqual([]);
    expect([...claimedBy.keys()].sort()).toEqual([...refs].sort());
    const done: string[] = [];
    for await (const unit of operator().units.iter({ domain, state: "done", limit: 10 }))
      done.push(unit.external_ref);
    expect(done.sort()).toEqual([...refs].sort());
    console.log(`race: 16 claimers, ${refs.length} units, 0 double claims`);
  });

  test("a long-poll claim is woken by a register on the other replica", async () => {
    const domain = `poll-${RUN}`;
    const waiter = new WorkLedger({ url: [A, B], token: AGENT, agent: `${PRINCIPAL}/poller` });
    const started = performance.now();
    const claim = waiter.claims.next({ domain, wait_seconds: 30 });
    await new Promise((r) => setTimeout(r, 700));
    await new WorkLedger({ url: [B, A], token: OPERATOR }).units.register([
      { external_ref: `ts-${RUN}/poll`, fleet: "ts", domain },
    ]);
    const got = await claim;
    const waited = performance.now() - started;
    expect(got.unit?.external_ref).toBe(`ts-${RUN}/poll`);
    expect(waited).toBeGreaterThanOrEqual(600);
    expect(waited).toBeLessThan(20_000);
    console.log(`long-poll: woken ${Math.round(waited)} ms after it began (the register came at ~700 ms)`);
  });

  test("a triage loop routes and answers a blocked unit's question", async () => {
    const domain = `triage-${RUN}`;
    const group = `triage-ts-${RUN}`;
    const ref = `ts-${RUN}/triage`;
    await operator().units.register([{ external_ref: ref, fleet: "ts", domain }]);
    const ag = agent("triaged");
    const claim = await ag.claims.next({ domain });
    const fence = { attempt_id: claim.attempt!.id };
    await ag.units.start(ref, fence);
    const asked = await ag.units.block(ref, {
      question: "Keep the legacy refund rounding?",
      assignee_group_slug: group,
      ...fence,
    });

    const triage = new WorkLedger({ url: URLS, token: TRIAGE });
    const handled = (async () => {
      // The triage service's loop: long-poll for unrouted questions, route, answer.
      for (;;) {
        const page = await triage.questions.unrouted({ assignee_group_slug: group, wait_seconds: 10 });
        for (const question of page.items) {
          await triage.questions.route(question.id, { external_task_id: `TASK-${question.id.slice(0, 8)}` });
          await triage.units.unblock(question.unit_id, { answer: "Yes, keep it.", question_id: question.id });
          return question.id;
        }
      }
    })();
    const answered = await ag.questions.get(asked.question.id, { wait_seconds: 20 });
    expect(await handled).toBe(asked.question.id);
    expect([answered.status, answered.answer]).toEqual(["answered", "Yes, keep it."]);
    const unit = await ag.units.get(ref);
    expect(unit.state).toBe("in_progress");
  });

  test("failover keeps the key: a write lost after replica A committed it is replayed by B", async () => {
    const replayed: (string | null)[] = [];
    let first = true;
    const lossy: Fetch = async (url, init) => {
      const response = await globalThis.fetch(url, init);
      replayed.push(response.headers.get("Idempotent-Replayed"));
      if (first) {
        first = false; // A did the write; its answer is lost on the way back
        await response.arrayBuffer();
        throw new TypeError("socket hang up");
      }
      return response;
    };
    const ref = `ts-${RUN}/failover`;
    const wl = new WorkLedger({ url: [A, B], token: OPERATOR, fetch: lossy });
    const registered = await wl.units.register([
      { external_ref: ref, fleet: "ts", domain: `failover-${RUN}` },
    ]);
    expect(wl.url).toBe(B);
    expect(replayed).toEqual([null, "true"]);
    expect([registered.created, registered.existing]).toEqual([1, 0]);
    const events = await operator().units.events(ref);
    expect(events.items.map((e) => e.event_type)).toEqual(["registered"]);
  });

  test.skipIf(!DEAD)("a dead URL first in the list: the client moves on", async () => {
    const wl = new WorkLedger({ url: [DEAD, A], token: OPERATOR, backoffMs: 10 });
    expect((await wl.health.readyz()).status).toBe("ok");
    expect(wl.url).toBe(A);
  });
});
