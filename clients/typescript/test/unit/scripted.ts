/** An injected `fetch` that answers from a script and records every request it got. */
import type { Fetch } from "../../src/index.js";

export interface Sent {
  url: string;
  method: string;
  headers: Record<string, string>;
  body: unknown;
  signal: AbortSignal | undefined;
}

export type Answer = Response | Error | ((sent: Sent) => Promise<Response> | Response);

export function problem(
  status: number,
  code: string,
  extra: Record<string, unknown> = {},
  headers: Record<string, string> = {},
): Response {
  const body = {
    type: `urn:work-ledger:problem:${code}`,
    title: code,
    status,
    detail: `refused: ${code}`,
    code,
    ...extra,
  };
  return new Response(JSON.stringify(body), {
    status,
    headers: { "Content-Type": "application/problem+json", ...headers },
  });
}

export function ok(body: unknown, status = 200): Response {
  return new Response(JSON.stringify(body), { status, headers: { "Content-Type": "application/json" } });
}

export function scripted(...answers: Answer[]): { fetch: Fetch; sent: Sent[] } {
  const sent: Sent[] = [];
  const fetch: Fetch = async (url, init) => {
    const record: Sent = {
      url,
      method: init.method ?? "GET",
      headers: { ...(init.headers as Record<string, string>) },
      body: typeof init.body === "string" ? JSON.parse(init.body) : undefined,
      signal: init.signal ?? undefined,
    };
    sent.push(record);
    const answer = answers.shift();
    if (answer === undefined) throw new Error(`unscripted request ${record.method} ${url}`);
    if (answer instanceof Error) throw answer;
    return typeof answer === "function" ? answer(record) : answer;
  };
  return { fetch, sent };
}

/** The sleeps asked for, without waiting. */
export function sleeps(): { sleep: (ms: number) => Promise<void>; delays: number[] } {
  const delays: number[] = [];
  return { delays, sleep: async (ms: number) => void delays.push(ms) };
}

export const CLAIM = {
  unit: { id: "u1", external_ref: "orders/refunds", state: "claimed" },
  attempt: { id: "a1", attempt_no: 1 },
  resumed: false,
};
