import { describe, expect, test } from "vitest";
import { LONG_POLL_MARGIN_MS, Sending, WorkLedger } from "../../src/index.js";
import { ok, problem, scripted } from "./scripted.js";

function hang(sent: { signal: AbortSignal | undefined }): Promise<Response> {
  return new Promise((_, reject) => {
    sent.signal?.addEventListener("abort", () => reject(sent.signal?.reason), { once: true });
  });
}

describe("abort and long-poll timeouts", () => {
  test("the caller's signal stops a long-poll in flight, without a retry", async () => {
    const { fetch, sent } = scripted(hang, hang);
    const wl = new WorkLedger({ url: "http://a:1", fetch });
    const stop = new AbortController();
    const claim = wl.claims.next({ wait_seconds: 30 }, { signal: stop.signal });
    await new Promise((r) => setTimeout(r, 20));
    stop.abort();
    await expect(claim).rejects.toMatchObject({ name: "AbortError" });
    expect(sent).toHaveLength(1);
  });

  test("an abort during the back-off ends the call before its next try", async () => {
    const { fetch, sent } = scripted(problem(503, "unavailable", {}, { "Retry-After": "30" }), ok({}));
    const stop = new AbortController();
    const wl = new WorkLedger({ url: "http://a:1", fetch });
    const read = wl.health.readyz({ signal: stop.signal });
    await new Promise((r) => setTimeout(r, 20));
    stop.abort();
    await expect(read).rejects.toMatchObject({ name: "AbortError" });
    expect(sent).toHaveLength(1);
  });

  test("a signal aborted before the call sends nothing", async () => {
    const { fetch, sent } = scripted(ok({}));
    const wl = new WorkLedger({ url: "http://a:1", fetch });
    await expect(wl.health.healthz({ signal: AbortSignal.abort() })).rejects.toMatchObject({
      name: "AbortError",
    });
    expect(sent).toHaveLength(0);
  });

  test("a long-poll's timeout is the client's plus wait_seconds plus a margin", () => {
    const wl = new WorkLedger({ url: "http://a:1", timeoutMs: 5_000 });
    const poll = new Sending({ method: "POST", path: "/units/claim", waitSeconds: 20, parse: String }, wl);
    const plain = new Sending({ method: "POST", path: "/units/claim", parse: String }, wl);
    expect(poll.request.timeoutMs).toBe(5_000 + 20_000 + LONG_POLL_MARGIN_MS);
    expect(plain.request.timeoutMs).toBe(5_000);
  });

  test("a request that times out is retried like a network error", async () => {
    const { fetch, sent } = scripted(hang, ok({ status: "ok" }));
    const wl = new WorkLedger({ url: "http://a:1", fetch, timeoutMs: 50, sleep: async () => {} });
    expect(await wl.health.healthz()).toEqual({ status: "ok" });
    expect(sent).toHaveLength(2);
  });
});
